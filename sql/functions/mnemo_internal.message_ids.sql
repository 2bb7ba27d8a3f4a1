-- mnemo_internal.message_ids(p_tenant_id, p_n) -> bigint[]
-- Draws p_n new message ids for a tenant, in order, and holds the tenant's shared
-- sealing lock until commit: mnemo_internal.build_message_segments takes it exclusively
-- (mnemo_internal.lock_message_ids), so it never seals past an id drawn here whose
-- message is not committed yet. A tenant's ids increase in the order they are drawn:
-- the segments, the recall index and the compiler's live tail read "ids above a
-- watermark", and a message drawn below one would never be read.
-- One server: the sequence, which only increases. On Citus this file is replaced
-- (sql/citus/): the ids are drawn on the node that holds the tenant's shards, whichever
-- node runs the call, from a sequence that is moved past the tenant's ids when its
-- shards arrive from another node.
-- Called by mnemo.record_messages (as mnemo_api_owner).
CREATE OR REPLACE FUNCTION mnemo_internal.message_ids(p_tenant_id text, p_n integer)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_ids bigint [] := '{}';
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('mnemo.message_segments'), hashtext(p_tenant_id));
    -- a loop of plain expressions, not a query: PL/pgSQL evaluates those without the
    -- executor, which a one-message call would otherwise pay for
    FOR i IN 1 .. coalesce(p_n, 0) LOOP
        v_ids := array_append(v_ids, nextval('mnemo.messages_message_id_seq'));
    END LOOP;
    RETURN v_ids;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.message_ids(text, integer) IS
'Draws a tenant''s new message ids in order, holding its sealing lock (shared) until commit.';
