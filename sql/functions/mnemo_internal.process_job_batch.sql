-- mnemo_internal.process_job_batch(p_batch_size) -> integer
-- Claims up to p_batch_size due 'embed' jobs (mnemo_internal.claim_embed_jobs: FOR
-- UPDATE SKIP LOCKED, so concurrent runners never take the same job and a runner that
-- dies releases its claims with its transaction; on Citus its own claim, one tenant's
-- jobs per batch) and runs them together (run_embed_jobs: one model call). When the
-- batch fails, each job is run again alone in its own subtransaction, and only the
-- jobs that fail alone are charged a try (fail_jobs): a job never fails because of
-- another job's (another tenant's) row. Other kinds run one per transaction, beside
-- these batches: see process_job and mnemo.run_jobs. Returns the number of jobs
-- claimed (0: no embed job due). The caller commits.
-- Writes: jobs, and what the jobs write (messages/memories embeddings, lexicon).
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
BEGIN
    SELECT c.tenants, c.job_ids INTO v_tenants, v_ids FROM mnemo_internal.claim_embed_jobs(p_batch_size) AS c;
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
'Claims and runs one batch of due embed jobs (SKIP LOCKED), isolating a failing job; the caller commits.';
