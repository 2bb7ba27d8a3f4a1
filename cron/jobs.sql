-- pg_cron jobs of Mnemosyne. cron.schedule() with a job name is an upsert, so this
-- file is run again by every deploy. Each command is idempotent and safe to overlap:
-- every sweep is a CALL of mnemo.run_sweep, which takes an advisory lock per sweep,
-- works in batches and commits per batch (see mnemo.lifecycle_status() for the runs).

-- Two jobs poll (run_jobs, the access sweep): pg_cron 1.4 schedules by the minute and
-- starts no job while one still runs, so each polls for 45 s and then starts no new
-- batch, ending before the next minute (docs/performance.md, "Lifecycle sweeps and pg_cron").

-- Job runner: embeddings and other async work, in committed batches; runs never overlap.
-- The deadline bounds the run, not the batch count (the next run goes on with the rest).
SELECT cron.schedule(
    'mnemo-run-jobs', '* * * * *', 'CALL mnemo.run_jobs(p_max_batches => 100000, p_max_seconds => 45)'
);

-- The lifecycle sweeps, one job each, from their list (mnemo_internal.sweeps()).
SELECT
    cron.schedule(
        'mnemo-' || replace(s.sweep, '_', '-'),
        s.schedule,
        format(
            'CALL mnemo.run_sweep(%L%s)', s.sweep,
            CASE WHEN s.max_seconds > 0 THEN format(', p_max_seconds => %s', s.max_seconds) ELSE '' END
        )
    )
FROM mnemo_internal.sweeps() AS s;

-- Jobs of earlier versions, and of sweeps no longer listed.
SELECT cron.unschedule(j.jobname)
FROM cron.job AS j
WHERE
    j.jobname LIKE 'mnemo-%' AND j.jobname <> 'mnemo-run-jobs'
    AND j.jobname NOT IN (SELECT 'mnemo-' || replace(s.sweep, '_', '-') FROM mnemo_internal.sweeps() AS s);
