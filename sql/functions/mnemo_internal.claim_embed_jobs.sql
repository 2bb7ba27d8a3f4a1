-- mnemo_internal.claim_embed_jobs(p_batch_size) -> (tenants text[], job_ids bigint[])
-- The claim of mnemo_internal.process_job_batch: up to p_batch_size due 'embed' jobs,
-- longest due first, locked FOR UPDATE SKIP LOCKED (concurrent runners never take the
-- same job; the locks last the caller's transaction). NULL arrays when none is free.
-- On Citus, sql/citus/mnemo_internal.claim_embed_jobs.sql replaces it (one tenant's
-- jobs per batch); process_job_batch is the same on both.
CREATE OR REPLACE FUNCTION mnemo_internal.claim_embed_jobs(
    p_batch_size integer, OUT tenants text[], OUT job_ids bigint[]
)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    SELECT array_agg(c.tenant_id), array_agg(c.job_id) INTO tenants, job_ids
    FROM (
        SELECT j.tenant_id, j.job_id FROM mnemo.jobs AS j
        WHERE j.status = 'queued' AND j.kind = 'embed' AND j.run_after <= now()
        ORDER BY j.run_after
        LIMIT p_batch_size
        FOR UPDATE SKIP LOCKED
    ) AS c;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.claim_embed_jobs(integer) IS
'Claims up to a batch of due embed jobs (FOR UPDATE SKIP LOCKED) for process_job_batch.';
