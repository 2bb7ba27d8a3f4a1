-- CALL mnemo.run_jobs(p_batch_size, p_max_batches, p_worker, p_max_seconds)
-- The job runner. Each round runs one batch of embed jobs (process_job_batch) and
-- one job of another kind (process_job), committing after each, so finished work is
-- durable, locks are short, and neither kind waits behind the other's backlog (a
-- tenant's long extraction never holds its embeddings back). pg_cron calls it once a
-- minute; it can also be called by hand (at top level, not inside a transaction
-- block, because it commits). Runs for the same p_worker never overlap (advisory
-- lock: a second one returns at once); different workers run side by side and never
-- share a job.
--   p_max_seconds = 0: runs until the queue has nothing due, or p_max_batches rounds.
--   p_max_seconds > 0: a deadline. It keeps polling an empty queue (twice a second),
--   and starts no round after the deadline, whatever is left queued; pg_cron starts
--   one such run a minute, so a run ends before the next one is due.
-- Between rounds it stops if the postmaster died (stop_if_postmaster_died), so an
-- orphaned run never blocks a restart for longer than one round.
--
-- Lock order (every path of the job runner, extraction and formation takes locks in
-- this order, so none waits for a lock while holding one that a waiter needs):
--   1. session advisory locks of the runners (mnemo.run_jobs / worker, mnemo.run_sweep
--      / sweep): only ever tried, never waited for;
--   2. job rows, claimed FOR UPDATE SKIP LOCKED: never waited for;
--   3. an extract job's session lock (advisory, transaction-level: mnemo.extract /
--      tenant/session), first in its transaction: one extraction of a session at a time;
--   4. the tenant's formation lock (advisory, transaction-level: mnemo.formation /
--      tenant), in every transaction that forms memories (extract job, remember,
--      correct; plpy/mnemo_db/formation/formation.py) before it writes or locks a data
--      row (an extract job reads and encodes first, then takes it for its writes),
--      and at most one per transaction: an extract job runs in a transaction of its
--      own (process_job);
--   5. data rows (messages, memories, entities, versions ...);
--   6. lexicon rows last, in one statement in (tenant, lexeme) order (add_to_lexicon).
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
    v_rounds integer := 0;
    v_deadline timestamptz := pg_catalog.clock_timestamp()
        + pg_catalog.make_interval(secs => coalesce(p_max_seconds, 0));
BEGIN
    IF p_batch_size IS NULL OR p_batch_size < 1 OR p_max_batches IS NULL OR p_max_batches < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'batch size and batch count must be positive';
    END IF;
    IF mnemo_internal.paused_cron_run() THEN
        RAISE NOTICE 'mnemo.run_jobs: its pg_cron job is paused; nothing to do';
        RETURN;
    END IF;
    IF NOT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext('mnemo.run_jobs'), coalesce(p_worker, 0)) THEN
        RAISE NOTICE 'mnemo.run_jobs: worker % is already running; nothing to do', p_worker;
        RETURN;
    END IF;
    LOOP
        PERFORM mnemo_internal.stop_if_postmaster_died();
        v_claimed := mnemo_internal.process_job_batch(p_batch_size);
        COMMIT;
        v_claimed := v_claimed + mnemo_internal.process_job();
        COMMIT;
        v_total := v_total + v_claimed;
        v_rounds := v_rounds + 1;
        EXIT WHEN v_rounds >= p_max_batches OR pg_catalog.clock_timestamp() >= v_deadline
            AND (v_claimed = 0 OR coalesce(p_max_seconds, 0) > 0);
        IF v_claimed = 0 THEN
            PERFORM pg_catalog.pg_sleep(0.5);
        END IF;
    END LOOP;
    PERFORM pg_catalog.pg_advisory_unlock(pg_catalog.hashtext('mnemo.run_jobs'), coalesce(p_worker, 0));
    RAISE NOTICE 'mnemo.run_jobs: % jobs in % rounds', v_total, v_rounds;
END;
$$;

COMMENT ON PROCEDURE mnemo.run_jobs (integer, integer, integer, numeric) IS
'Job runner: embed batches and other jobs in alternation, committing each, until its deadline.';
