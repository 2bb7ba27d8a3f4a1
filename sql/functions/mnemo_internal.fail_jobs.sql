-- mnemo_internal.fail_jobs(p_tenants, p_job_ids, p_error) -> void
-- Records a failed attempt for each job: retried after an exponential backoff
-- (job_backoff_seconds * 2^tries) until job_max_tries, then marked 'failed' with
-- the last error kept for the operator. Writes: mnemo.jobs.
-- PL/pgSQL, not SQL: Citus plans no query on a distributed table from a SQL function's
-- parameters. One job at a time, its tries read first (it is claimed: they cannot
-- change), and its new row computed here: Citus refuses an UPDATE that passes a column
-- to a STABLE function (now() + an interval of the tries). The same on one server.
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
'Schedules a retry with backoff for failed jobs, or marks them failed.';
