-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.process_job() -> integer, on Citus.
-- Replaces sql/functions/mnemo_internal.process_job.sql on a Citus coordinator, where
-- Citus takes FOR UPDATE only in a query routed to one tenant's shard: the tenants with
-- a due job are taken in the order of their longest-due one, and the first job that
-- no other runner holds is claimed FOR UPDATE SKIP LOCKED in its tenant's shard.
-- Everything else is the single-server version's: its comment says what it does.
CREATE OR REPLACE FUNCTION mnemo_internal.process_job()
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_job record;
    v_result jsonb;
    v_tenant text;
    v_found boolean := false;
BEGIN
    FOR v_tenant IN
        SELECT j.tenant_id FROM mnemo.jobs AS j
        WHERE j.status = 'queued' AND j.kind <> 'embed' AND j.run_after <= now()
        GROUP BY j.tenant_id ORDER BY min(j.run_after), j.tenant_id
    LOOP
        SELECT j.tenant_id, j.job_id, j.kind, j.payload INTO v_job
        FROM mnemo.jobs AS j
        WHERE j.tenant_id = v_tenant AND j.status = 'queued' AND j.kind <> 'embed' AND j.run_after <= now()
        ORDER BY j.run_after
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        v_found := FOUND;
        EXIT WHEN v_found;
    END LOOP;
    IF NOT v_found THEN
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
'Claims and runs the next due job of a non-embed kind (SKIP LOCKED, in its tenant''s shard; Citus).';
