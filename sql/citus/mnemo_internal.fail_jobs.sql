-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.fail_jobs(p_tenants, p_job_ids, p_error) -> void, on Citus.
-- Replaces sql/functions/mnemo_internal.fail_jobs.sql on a Citus coordinator, where an
-- UPDATE may not pass a column to a STABLE function (now() + interval with the job's
-- tries): each job's tries are read first (the job is claimed, so they cannot change)
-- and its new row is computed here. The same retry and backoff as on one server.
CREATE OR REPLACE FUNCTION mnemo_internal.fail_jobs(
    p_tenants text[], p_job_ids bigint[], p_error text
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_max integer := (mnemo_internal.setting('job_max_tries'))::integer;
    v_backoff numeric := (mnemo_internal.setting('job_backoff_seconds'))::numeric;
    v_tries integer;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_job_ids), 0) LOOP
        SELECT j.tries INTO v_tries FROM mnemo.jobs AS j
        WHERE j.tenant_id = p_tenants[i] AND j.job_id = p_job_ids[i];
        CONTINUE WHEN NOT FOUND;
        UPDATE mnemo.jobs AS j
        SET tries = v_tries + 1,
            last_error = left(p_error, 2000),
            updated_at = now(),
            status = CASE WHEN v_tries + 1 >= v_max THEN 'failed' ELSE 'queued' END,
            finished_at = CASE WHEN v_tries + 1 >= v_max THEN now() END,
            run_after = now() + make_interval(secs => v_backoff * power(2, v_tries))
        WHERE j.tenant_id = p_tenants[i] AND j.job_id = p_job_ids[i];
    END LOOP;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.fail_jobs(text[], bigint[], text) IS
'Schedules a retry with backoff for failed jobs, or marks them failed (Citus).';
