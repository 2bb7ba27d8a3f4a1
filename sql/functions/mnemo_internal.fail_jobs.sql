-- mnemo_internal.fail_jobs(p_tenants, p_job_ids, p_error) -> void
-- Records a failed attempt for each job: retried after an exponential backoff
-- (job_backoff_seconds * 2^tries) until job_max_tries, then marked 'failed' with
-- the last error kept for the operator. Writes: mnemo.jobs.
-- PL/pgSQL, not SQL: Citus plans no query on a distributed table from a SQL function's parameters
CREATE OR REPLACE FUNCTION mnemo_internal.fail_jobs(
    p_tenants text[], p_job_ids bigint[], p_error text
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    UPDATE mnemo.jobs AS j
    SET tries = j.tries + 1,
        last_error = left(p_error, 2000),
        updated_at = now(),
        status = CASE WHEN j.tries + 1 >= (mnemo_internal.setting('job_max_tries'))::integer
            THEN 'failed' ELSE 'queued' END,
        finished_at = CASE WHEN j.tries + 1 >= (mnemo_internal.setting('job_max_tries'))::integer
            THEN now() END,
        run_after = now() + make_interval(
            secs => (mnemo_internal.setting('job_backoff_seconds'))::numeric * power(2, j.tries))
    FROM unnest(p_tenants, p_job_ids) AS f (tenant_id, job_id)
    WHERE j.tenant_id = f.tenant_id AND j.job_id = f.job_id;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.fail_jobs(text[], bigint[], text) IS
'Schedules a retry with backoff for failed jobs, or marks them failed.';
