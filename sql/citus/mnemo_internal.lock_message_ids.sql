-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.lock_message_ids(p_tenant_id) -> boolean
-- Citus's version of sql/functions/mnemo_internal.lock_message_ids.sql: takes the
-- tenant's sealing lock exclusively until commit on the node that holds the tenant's
-- shards, where mnemo_internal.message_ids draws its ids and holds the lock shared.
-- The segments sweep runs on the coordinator: an advisory lock taken there never met
-- the writers delegated to the worker, and could seal past a lower id not committed
-- yet. From the coordinator this routine runs itself on the worker, through a query
-- routed to the tenant's shard, in the transaction block a locking read opens there.
-- false when writers held the lock for 2 s (lock_timeout, set where it waits).
CREATE OR REPLACE FUNCTION mnemo_internal.lock_message_ids(p_tenant_id text)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
DECLARE
    v_shard bigint;
    v_local boolean;
    v_locked boolean;
    v_rows bigint;
BEGIN
    v_shard := get_shard_id_for_distribution_column('mnemo.sessions', p_tenant_id);
    SELECT p.groupid = l.groupid INTO v_local
    FROM pg_dist_placement AS p, pg_dist_local_group AS l
    WHERE p.shardid = v_shard;
    IF NOT v_local THEN
        -- (the locking read: a transaction block there, as in mnemo_internal.message_ids)
        WITH lock AS (SELECT FROM mnemo.sessions AS s
            WHERE s.tenant_id = p_tenant_id AND s.session_id IS NULL FOR KEY SHARE)
        SELECT mnemo_internal.lock_message_ids(p_tenant_id), count(*) INTO v_locked, v_rows
        FROM mnemo.sessions AS s WHERE s.tenant_id = p_tenant_id;
        RETURN v_locked;
    END IF;
    BEGIN
        PERFORM pg_advisory_xact_lock(hashtext('mnemo.message_segments'), hashtext(p_tenant_id));
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    RETURN true;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.lock_message_ids(text) IS
'Citus: waits (2 s at most) for a tenant''s in-flight message writers on the node holding its shards.';
