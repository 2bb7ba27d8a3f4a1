-- pg_cron jobs of Mnemosyne. cron.schedule() with a job name is an upsert, so this
-- file is run again by every deploy. Each command is idempotent and safe to overlap.

-- Job runner: embeddings and other async work, in committed batches. pg_cron 1.4
-- schedules by the minute, so each run keeps polling for 55 s; runs never overlap.
SELECT cron.schedule(
    'mnemo-run-jobs', '* * * * *', 'CALL mnemo.run_jobs(p_max_batches => 100000, p_max_seconds => 55)'
);

-- History partitions for the coming months, created well ahead of time.
SELECT cron.schedule(
    'mnemo-message-partitions', '17 3 * * *',
    $$SELECT mnemo.create_message_partitions(current_date, 3)$$
);

-- pg_cron's own run history grows without bound; keep a week.
SELECT cron.schedule(
    'mnemo-prune-cron-history', '43 3 * * *',
    $$DELETE FROM cron.job_run_details WHERE end_time < now() - interval '7 days'$$
);
