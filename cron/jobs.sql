-- pg_cron jobs of Mnemosyne. cron.schedule() with a job name is an upsert, so this
-- file is run again by every deploy. Each command is idempotent and safe to overlap:
-- every sweep is a CALL of mnemo.run_sweep, which takes an advisory lock per sweep,
-- works in batches and commits per batch (see mnemo.lifecycle_status() for the runs).

-- Two jobs poll (run_jobs, the access sweep): pg_cron 1.4 schedules by the minute.
-- Each polls for 45 s and, past that deadline, starts no new batch even while work
-- remains, so it ends before the next minute starts. With cron.use_background_workers
-- on, pg_cron 1.4 starts no job while one still runs (citusdata/pg_cron#200): a run
-- that reached past the minute delayed every job's next run until it ended (measured
-- with 55 s: jobs ran every 55-105 s, and the access sweep then folded ~100 s of
-- compiles in one burst).

-- Job runner: embeddings and other async work, in committed batches; runs never overlap.
-- The deadline bounds the run, not the batch count (the next run goes on with the rest).
SELECT cron.schedule(
    'mnemo-run-jobs', '* * * * *', 'CALL mnemo.run_jobs(p_max_batches => 100000, p_max_seconds => 45)'
);

-- Retrieval segments: a tenant's newer messages sealed for compile_context's scoring.
SELECT cron.schedule('mnemo-segments', '* * * * *', $$CALL mnemo.run_sweep('segments')$$);

-- Access statistics of the memories that compile_context sent (from context_log).
SELECT cron.schedule(
    'mnemo-access', '* * * * *', $$CALL mnemo.run_sweep('access', p_max_seconds => 45)$$
);

-- Working memory (UNLOGGED) rebuilt from durable data after a crash or a change.
SELECT cron.schedule('mnemo-working-memory', '* * * * *', $$CALL mnemo.run_sweep('working_memory')$$);

-- Lower fidelities and declared losses for new memories.
SELECT cron.schedule('mnemo-summaries', '*/5 * * * *', $$CALL mnemo.run_sweep('summaries')$$);

-- History compaction of sessions past 2x their context window (seed 003 §9.3).
SELECT cron.schedule('mnemo-compaction', '*/10 * * * *', $$CALL mnemo.run_sweep('compaction')$$);

-- Promotion session -> episodic -> semantic / procedural (seed 003 §9.1).
SELECT cron.schedule('mnemo-promotion', '*/15 * * * *', $$CALL mnemo.run_sweep('promotion')$$);

-- Session expiry, memory TTLs, demotion by activity (seed 003 §9.2).
SELECT cron.schedule('mnemo-expiry', '7 * * * *', $$CALL mnemo.run_sweep('expiry')$$);

-- History partitions: months ahead created, fully compacted months past retention detached.
SELECT cron.schedule('mnemo-partitions', '17 3 * * *', $$CALL mnemo.run_sweep('partitions')$$);

-- pg_cron's own run history and the sweep ledger grow without bound; keep a week.
SELECT cron.schedule('mnemo-prune', '43 3 * * *', $$CALL mnemo.run_sweep('prune')$$);

-- Jobs of earlier versions, replaced by the sweeps above.
SELECT cron.unschedule(j.jobname)
FROM cron.job AS j
WHERE j.jobname IN ('mnemo-message-partitions', 'mnemo-prune-cron-history');
