-- mnemo_internal.sweep_access(p_now, p_tenant_id, p_batch_size, p_state) -> jsonb
-- One batch of the 'access' sweep: folds the context_log rows that compile_context
-- wrote since the last run into the access statistics of the memories they sent
-- (mnemo_internal.record_access, per session: up to p_batch_size sessions a batch).
-- A sweep over context_log's unaccounted rows (partial index) instead of a job queued
-- by every compile: the compile writes only its log row (its statement ~0.35 ms
-- faster, one row of WAL fewer), and the folding runs once a minute for everything
-- that waits. The statistics (the frequency and freshness of the retrieval score)
-- lag by up to a minute. p_now and p_state are the sweep contract's; unused here.
-- Called by mnemo.run_sweep('access') (pg_cron, every minute). Writes: memories,
-- context_log.
CREATE OR REPLACE FUNCTION mnemo_internal.sweep_access(
    p_now timestamptz,
    p_tenant_id text,
    p_batch_size integer,
    p_state jsonb
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_s record;
    v_sessions integer := 0;
    v_memories integer := 0;
BEGIN
    FOR v_s IN
        SELECT DISTINCT cl.tenant_id, cl.session_id FROM mnemo.context_log AS cl
        WHERE NOT cl.accounted AND (p_tenant_id IS NULL OR cl.tenant_id = p_tenant_id)
        LIMIT p_batch_size
    LOOP
        v_memories := v_memories + mnemo_internal.record_access(v_s.tenant_id, v_s.session_id);
        v_sessions := v_sessions + 1;
    END LOOP;
    RETURN jsonb_build_object('rows', v_sessions, 'done', v_sessions < p_batch_size,
        'counts', jsonb_build_object('sessions', v_sessions, 'memories_updated', v_memories));
END;
$$;

COMMENT ON FUNCTION mnemo_internal.sweep_access(timestamptz, text, integer, jsonb) IS
'One batch of the access sweep: folds new context_log rows into memory access statistics.';
