-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.claim_embed_jobs(p_batch_size) -> (tenants text[], job_ids bigint[]), on Citus.
-- Replaces sql/functions/mnemo_internal.claim_embed_jobs.sql on a Citus coordinator,
-- where Citus takes FOR UPDATE only in a query routed to one tenant's shard: the batch
-- is the due embed jobs of one tenant, the tenant whose job has been due longest (the
-- next one if another runner holds all of its jobs), claimed FOR UPDATE SKIP LOCKED.
CREATE OR REPLACE FUNCTION mnemo_internal.claim_embed_jobs(
    p_batch_size integer, OUT tenants text[], OUT job_ids bigint[]
)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_tenant text;
BEGIN
    FOR v_tenant IN
        SELECT j.tenant_id FROM mnemo.jobs AS j
        WHERE j.status = 'queued' AND j.kind = 'embed' AND j.run_after <= now()
        GROUP BY j.tenant_id ORDER BY min(j.run_after), j.tenant_id
    LOOP
        SELECT array_agg(c.tenant_id), array_agg(c.job_id) INTO tenants, job_ids
        FROM (
            SELECT j.tenant_id, j.job_id FROM mnemo.jobs AS j
            WHERE j.tenant_id = v_tenant AND j.status = 'queued' AND j.kind = 'embed' AND j.run_after <= now()
            ORDER BY j.run_after
            LIMIT p_batch_size
            FOR UPDATE SKIP LOCKED
        ) AS c;
        EXIT WHEN job_ids IS NOT NULL;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.claim_embed_jobs(integer) IS
'Claims up to a batch of due embed jobs of one tenant (SKIP LOCKED; Citus) for process_job_batch.';
