-- mnemo_internal.sweep_prune(p_now, p_tenant_id, p_batch_size, p_state) -> jsonb
-- Keeps the operational histories bounded, one batch: pg_cron's
-- cron.job_run_details (when pg_cron is installed) and the finished runs of
-- mnemo_internal.lifecycle_runs older than lifecycle_history_days before p_now.
-- p_tenant_id is ignored. Called by mnemo.run_sweep('prune').
-- Writes: cron.job_run_details, lifecycle_runs.
CREATE OR REPLACE FUNCTION mnemo_internal.sweep_prune(
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
    v_before timestamptz := p_now - make_interval(
        days => (mnemo_internal.setting('lifecycle_history_days') #>> '{}')::integer);
    v_cron bigint := 0;
    v_runs bigint;
BEGIN
    IF to_regclass('cron.job_run_details') IS NOT NULL THEN
        EXECUTE 'DELETE FROM cron.job_run_details WHERE runid IN (
            SELECT runid FROM cron.job_run_details WHERE end_time < $1 ORDER BY runid LIMIT $2)'
        USING v_before, p_batch_size;
        GET DIAGNOSTICS v_cron = ROW_COUNT;
    END IF;
    DELETE FROM mnemo_internal.lifecycle_runs WHERE run_id IN (
        SELECT r.run_id FROM mnemo_internal.lifecycle_runs AS r
        WHERE r.finished_at < v_before ORDER BY r.run_id LIMIT p_batch_size);
    GET DIAGNOSTICS v_runs = ROW_COUNT;
    RETURN jsonb_build_object('rows', v_cron + v_runs, 'done', v_cron < p_batch_size AND v_runs < p_batch_size,
        'state', '{}'::jsonb, 'counts', jsonb_build_object('cron_details', v_cron, 'sweep_runs', v_runs));
END;
$$;

COMMENT ON FUNCTION mnemo_internal.sweep_prune(timestamptz, text, integer, jsonb) IS
'One batch of pruning: old cron.job_run_details and sweep runs.';
