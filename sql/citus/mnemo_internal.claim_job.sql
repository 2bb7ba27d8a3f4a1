-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.claim_job() -> (tenant_id, job_id, kind, payload), on Citus.
-- Replaces sql/functions/mnemo_internal.claim_job.sql on a Citus coordinator, where
-- Citus takes FOR UPDATE only in a query routed to one tenant's shard: the tenants with
-- a due job are taken in the order of their longest-due one, and the first job that
-- no other runner holds is claimed FOR UPDATE SKIP LOCKED in its tenant's shard.
CREATE OR REPLACE FUNCTION mnemo_internal.claim_job(
    OUT tenant_id text, OUT job_id bigint, OUT kind text, OUT payload jsonb
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
        WHERE j.status = 'queued' AND j.kind <> 'embed' AND j.run_after <= now()
        GROUP BY j.tenant_id ORDER BY min(j.run_after), j.tenant_id
    LOOP
        SELECT j.tenant_id, j.job_id, j.kind, j.payload INTO tenant_id, job_id, kind, payload
        FROM mnemo.jobs AS j
        WHERE j.tenant_id = v_tenant AND j.status = 'queued' AND j.kind <> 'embed' AND j.run_after <= now()
        ORDER BY j.run_after
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        EXIT WHEN FOUND;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.claim_job() IS
'Claims the next due non-embed job (SKIP LOCKED, in its tenant''s shard; Citus); NULLs when none.';
