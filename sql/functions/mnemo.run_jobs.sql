-- CALL mnemo.run_jobs(p_batch_size, p_max_batches, p_worker, p_max_seconds)
-- The job runner: claims due jobs in batches (see process_job_batch), committing
-- after each batch so that finished work is durable and locks are short. pg_cron
-- calls it every few seconds; it can also be called by hand (at top level, not
-- inside a transaction block, because it commits). Runs for the same p_worker never
-- overlap (advisory lock: a second one returns at once); different workers run side
-- by side and never share a job. With p_max_seconds > 0 it keeps polling an empty
-- queue (twice a second) until that much time has passed: pg_cron (1.4 schedules by
-- the minute) starts one such run a minute, so new jobs wait well under a second.
-- No SET search_path here: a procedure with a SET clause cannot COMMIT, so every
-- name is schema-qualified instead.
CREATE OR REPLACE PROCEDURE mnemo.run_jobs(
    p_batch_size integer DEFAULT 64,
    p_max_batches integer DEFAULT 100,
    p_worker integer DEFAULT 0,
    p_max_seconds numeric DEFAULT 0
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_claimed integer;
    v_total integer := 0;
    v_batches integer := 0;
    v_deadline timestamptz := pg_catalog.clock_timestamp()
        + pg_catalog.make_interval(secs => coalesce(p_max_seconds, 0));
BEGIN
    IF p_batch_size IS NULL OR p_batch_size < 1 OR p_max_batches IS NULL OR p_max_batches < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'batch size and batch count must be positive';
    END IF;
    IF NOT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext('mnemo.run_jobs'), coalesce(p_worker, 0)) THEN
        RAISE NOTICE 'mnemo.run_jobs: worker % is already running; nothing to do', p_worker;
        RETURN;
    END IF;
    LOOP
        v_claimed := mnemo_internal.process_job_batch(p_batch_size);
        COMMIT;
        v_total := v_total + v_claimed;
        v_batches := v_batches + 1;
        EXIT WHEN v_batches >= p_max_batches OR pg_catalog.clock_timestamp() >= v_deadline
            AND v_claimed = 0;
        IF v_claimed = 0 THEN
            PERFORM pg_catalog.pg_sleep(0.5);
        END IF;
    END LOOP;
    PERFORM pg_catalog.pg_advisory_unlock(pg_catalog.hashtext('mnemo.run_jobs'), coalesce(p_worker, 0));
    RAISE NOTICE 'mnemo.run_jobs: % jobs in % batches', v_total, v_batches;
END;
$$;

COMMENT ON PROCEDURE mnemo.run_jobs (integer, integer, integer, numeric) IS
'Job runner: processes due jobs in batches, committing per batch.';
