-- mnemo_internal.lock_message_ids(p_tenant_id) -> boolean
-- Takes the tenant's sealing lock exclusively until commit: waits until every
-- transaction that drew message ids for the tenant (mnemo_internal.message_ids, which
-- holds it shared) has ended, and keeps new ones from drawing meanwhile, so every id
-- up to the highest committed one is committed. false when writers held it for 2 s
-- (the caller tries again at its next run).
-- On Citus this file is replaced (sql/citus/): the lock is taken on the node that
-- holds the tenant's shards, where the ids are drawn.
-- Called by mnemo_internal.build_message_segments.
CREATE OR REPLACE FUNCTION mnemo_internal.lock_message_ids(p_tenant_id text)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('mnemo.message_segments'), hashtext(p_tenant_id));
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.lock_message_ids(text) IS
'Waits (2 s at most) for a tenant''s in-flight message writers and holds off new ones until commit.';
