-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.process_job_batch(p_batch_size) -> integer, on Citus.
-- Replaces sql/functions/mnemo_internal.process_job_batch.sql on a Citus coordinator,
-- where Citus takes FOR UPDATE only in a query routed to one tenant's shard: the batch
-- is the due embed jobs of one tenant, the tenant whose job has been due longest (the
-- next one if another runner holds all of its jobs), claimed FOR UPDATE SKIP LOCKED.
-- Everything else is the single-server version's: its comment says what it does.
CREATE OR REPLACE FUNCTION mnemo_internal.process_job_batch(p_batch_size integer DEFAULT 64)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_tenants text [];
    v_ids bigint [];
    v_error text;
    v_tenant text;
BEGIN
    FOR v_tenant IN
        SELECT j.tenant_id FROM mnemo.jobs AS j
        WHERE j.status = 'queued' AND j.kind = 'embed' AND j.run_after <= now()
        GROUP BY j.tenant_id ORDER BY min(j.run_after), j.tenant_id
    LOOP
        SELECT array_agg(c.tenant_id), array_agg(c.job_id) INTO v_tenants, v_ids
        FROM (
            SELECT j.tenant_id, j.job_id FROM mnemo.jobs AS j
            WHERE j.tenant_id = v_tenant AND j.status = 'queued' AND j.kind = 'embed' AND j.run_after <= now()
            ORDER BY j.run_after
            LIMIT p_batch_size
            FOR UPDATE SKIP LOCKED
        ) AS c;
        EXIT WHEN v_ids IS NOT NULL;
    END LOOP;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    BEGIN
        PERFORM mnemo_internal.run_embed_jobs(v_tenants, v_ids);
    EXCEPTION
        WHEN crash_shutdown THEN RAISE;  -- the postmaster died: no job's fault
        WHEN OTHERS THEN v_error := SQLERRM;
    END;
    IF v_error IS NOT NULL AND cardinality(v_ids) = 1 THEN
        PERFORM mnemo_internal.fail_jobs(v_tenants, v_ids, v_error);
    ELSIF v_error IS NOT NULL THEN
        FOR i IN 1 .. cardinality(v_ids) LOOP
            BEGIN
                PERFORM mnemo_internal.run_embed_jobs(ARRAY[v_tenants[i]], ARRAY[v_ids[i]]);
            EXCEPTION
                WHEN crash_shutdown THEN RAISE;
                WHEN OTHERS THEN
                    PERFORM mnemo_internal.fail_jobs(ARRAY[v_tenants[i]], ARRAY[v_ids[i]], SQLERRM);
            END;
        END LOOP;
    END IF;
    RETURN cardinality(v_ids);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.process_job_batch(integer) IS
'Claims and runs one batch of due embed jobs of one tenant (SKIP LOCKED; Citus), isolating a failing job.';
