-- mnemo_internal.claim_job() -> (tenant_id, job_id, kind, payload)
-- The claim of mnemo_internal.process_job: the next due job of a kind other than
-- 'embed', locked FOR UPDATE SKIP LOCKED (another runner skips it; the lock lasts the
-- caller's transaction). All NULL when no job is due or free.
-- On Citus, sql/citus/mnemo_internal.claim_job.sql replaces it (one tenant's shard at
-- a time); process_job is the same on both.
CREATE OR REPLACE FUNCTION mnemo_internal.claim_job(
    OUT tenant_id text, OUT job_id bigint, OUT kind text, OUT payload jsonb
)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    SELECT j.tenant_id, j.job_id, j.kind, j.payload INTO tenant_id, job_id, kind, payload
    FROM mnemo.jobs AS j
    WHERE j.status = 'queued' AND j.kind <> 'embed' AND j.run_after <= now()
    ORDER BY j.run_after
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.claim_job() IS
'Claims the next due non-embed job (FOR UPDATE SKIP LOCKED) for process_job; NULLs when none.';
