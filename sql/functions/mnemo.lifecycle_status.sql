-- mnemo.lifecycle_status() -> table
-- The admin view of Mnemosyne's background jobs: one row per pg_cron job named
-- mnemo-* (and per sweep that ran by hand), with its schedule, its last run (start,
-- duration, status, rows touched, batches, per-sweep counters such as rows promoted
-- or the lowest compaction ratio) and the last error. Sweeps report from
-- mnemo_internal.lifecycle_runs; other jobs (the job runner) from pg_cron's
-- cron.job_run_details. Works without pg_cron (sweep runs only).
-- Usage: SELECT * FROM mnemo.lifecycle_status();  Reads only.
CREATE OR REPLACE FUNCTION mnemo.lifecycle_status()
RETURNS TABLE (
    job text,
    schedule text,
    command text,
    active boolean,
    last_start timestamptz,
    duration interval,
    status text,
    rows_touched bigint,
    batches integer,
    counts jsonb,
    last_error text,
    last_error_at timestamptz
)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    -- pg_cron's jobs and their last runs, when pg_cron is installed (else no rows).
    v_cron text := CASE WHEN to_regclass('cron.job') IS NOT NULL THEN $q$
        SELECT j.jobname::text AS job, j.schedule::text AS schedule, j.command::text AS command, j.active,
            substring(j.command FROM $r$run_sweep\('([a-z_]+)'$r$) AS sweep,
            d.start_time, d.end_time, d.status::text AS status,
            e.return_message::text AS error, e.end_time AS error_at
        FROM cron.job AS j
        LEFT JOIN LATERAL (SELECT * FROM cron.job_run_details AS x WHERE x.jobid = j.jobid
            ORDER BY x.runid DESC LIMIT 1) AS d ON true
        LEFT JOIN LATERAL (SELECT * FROM cron.job_run_details AS x WHERE x.jobid = j.jobid
            AND x.status = 'failed' ORDER BY x.runid DESC LIMIT 1) AS e ON true
        WHERE j.jobname LIKE 'mnemo-%'
    $q$ ELSE $q$
        SELECT NULL::text AS job, NULL::text AS schedule, NULL::text AS command, NULL::boolean AS active,
            NULL::text AS sweep, NULL::timestamptz AS start_time, NULL::timestamptz AS end_time,
            NULL::text AS status, NULL::text AS error, NULL::timestamptz AS error_at
        WHERE false
    $q$ END;
BEGIN
    RETURN QUERY EXECUTE format($q$
    WITH cron_jobs AS (%s),
    jobs AS (
        SELECT * FROM cron_jobs
        UNION ALL
        SELECT 'run_sweep(' || s.sweep || ')', NULL, NULL, NULL, s.sweep, NULL, NULL, NULL, NULL, NULL
        FROM (SELECT DISTINCT r.sweep FROM mnemo_internal.lifecycle_runs AS r) AS s
        WHERE NOT EXISTS (SELECT FROM cron_jobs AS c WHERE c.sweep = s.sweep)
    )
    SELECT j.job, j.schedule, j.command, j.active,
        coalesce(r.started_at, j.start_time),
        CASE WHEN r.run_id IS NOT NULL THEN r.finished_at - r.started_at ELSE j.end_time - j.start_time END,
        coalesce(r.status, j.status), r.rows_touched, r.batches, r.counts,
        coalesce(f.error, j.error), coalesce(f.finished_at, j.error_at)
    FROM jobs AS j
    LEFT JOIN LATERAL (SELECT * FROM mnemo_internal.lifecycle_runs AS x WHERE x.sweep = j.sweep
        ORDER BY x.run_id DESC LIMIT 1) AS r ON true
    LEFT JOIN LATERAL (SELECT x.error, x.finished_at FROM mnemo_internal.lifecycle_runs AS x
        WHERE x.sweep = j.sweep AND x.status = 'failed' ORDER BY x.run_id DESC LIMIT 1) AS f ON true
    ORDER BY j.job
    $q$, v_cron);
END;
$$;

COMMENT ON FUNCTION mnemo.lifecycle_status() IS
'Admin view of the background jobs: schedule, last run, duration, rows touched, errors.';
