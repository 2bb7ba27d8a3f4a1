-- mnemo_internal.process_job() -> integer
-- Claims the next due job of a kind other than 'embed' (mnemo_internal.claim_job: FOR
-- UPDATE SKIP LOCKED; on Citus its own claim, one tenant's shard at a time) and
-- runs it (run_job) in a subtransaction: done, or a failed attempt (fail_jobs). One
-- such job per transaction: an extract job takes its tenant's formation lock before
-- any row (the lock order of mnemo.run_jobs), and its work is bounded per run (a job
-- whose result carries "continue" stays queued with that payload and goes on in a
-- later transaction, after the other due jobs). Returns the number of jobs claimed
-- (0 or 1). The caller commits. Writes: jobs, and what the job writes.
CREATE OR REPLACE FUNCTION mnemo_internal.process_job()
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_job record;
    v_result jsonb;
BEGIN
    SELECT c.tenant_id, c.job_id, c.kind, c.payload INTO v_job FROM mnemo_internal.claim_job() AS c;
    IF v_job.job_id IS NULL THEN
        RETURN 0;
    END IF;
    BEGIN
        v_result := mnemo_internal.run_job(v_job.tenant_id, v_job.kind, v_job.payload);
        IF v_result ? 'continue' THEN
            UPDATE mnemo.jobs AS j
            SET payload = v_result -> 'continue', run_after = now(), updated_at = now()
            WHERE j.tenant_id = v_job.tenant_id AND j.job_id = v_job.job_id;
        ELSE
            UPDATE mnemo.jobs AS j
            SET status = 'done', tries = j.tries + 1, updated_at = now(), finished_at = now()
            WHERE j.tenant_id = v_job.tenant_id AND j.job_id = v_job.job_id;
        END IF;
    EXCEPTION WHEN OTHERS THEN
        PERFORM mnemo_internal.fail_jobs(ARRAY[v_job.tenant_id], ARRAY[v_job.job_id], SQLERRM);
    END;
    RETURN 1;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.process_job() IS
'Claims and runs the next due job of a non-embed kind (SKIP LOCKED); the caller commits.';
