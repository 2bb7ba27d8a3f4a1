-- mnemo_internal.record_access(p_tenant_id, p_session_id) -> integer
-- Counts the memories that the session's not yet accounted context_log rows included
-- into memories.access_count / last_accessed_at (the frequency and freshness terms
-- of the retrieval score), then marks those rows accounted. Called by the 'access'
-- sweep (mnemo_internal.sweep_access), off the hot path, and by the job of the same
-- name that earlier versions queued. Returns the number of memories updated.
-- Writes: memories, context_log.
CREATE OR REPLACE FUNCTION mnemo_internal.record_access(p_tenant_id text, p_session_id uuid)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_updated integer;
BEGIN
    WITH rows AS (
        UPDATE mnemo.context_log AS cl SET accounted = true
        WHERE cl.tenant_id = p_tenant_id AND cl.session_id = p_session_id AND NOT cl.accounted
        RETURNING cl.items, cl.created_at
    ), uses AS (
        SELECT substr(i.item ->> 'source', 5)::bigint AS memory_id, count(*) AS n,
            max(r.created_at) AS last_at
        FROM rows AS r CROSS JOIN LATERAL jsonb_array_elements(r.items) AS i (item)
        WHERE i.item ->> 'source' LIKE 'mem:%'
        GROUP BY 1
    )
    UPDATE mnemo.memories AS m
    SET access_count = m.access_count + u.n,
        last_accessed_at = greatest(m.last_accessed_at, u.last_at)
    FROM uses AS u
    WHERE m.tenant_id = p_tenant_id AND m.memory_id = u.memory_id;
    GET DIAGNOSTICS v_updated = ROW_COUNT;
    RETURN v_updated;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.record_access(text, uuid) IS
'Folds a session''s unaccounted context_log inclusions into memory access statistics.';
