-- mnemo_internal.paused_cron_run(p_command) -> boolean
-- Whether this backend runs a pg_cron job that is paused (cron.job.active = false), so
-- that mnemo.run_jobs and mnemo.run_sweep return at once instead of working. pg_cron's
-- scheduler runs from a cached job list, and the cache can miss the invalidation of an
-- UPDATE of cron.job: a pause was once ignored for 16 minutes, until the next
-- cron.schedule() reloaded the list. The runners ask the table itself, so a paused job
-- never does work, whatever the scheduler believes.
--   p_command: the command to look up (tests); default: this backend's own query when
--   the backend is pg_cron's (a job's command is the top-level query of its backend),
--   else the answer is false: a CALL by hand always runs.
CREATE OR REPLACE FUNCTION mnemo_internal.paused_cron_run(p_command text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_command text := p_command;
BEGIN
    IF to_regclass('cron.job') IS NULL THEN
        RETURN false;
    END IF;
    IF v_command IS NULL THEN
        SELECT a.query INTO v_command FROM pg_stat_activity AS a
        WHERE a.pid = pg_backend_pid() AND (a.backend_type = 'pg_cron' OR a.application_name = 'pg_cron');
    END IF;
    RETURN v_command IS NOT NULL
        AND EXISTS (SELECT 1 FROM cron.job AS j WHERE j.command = v_command AND NOT j.active);
END
$$;

COMMENT ON FUNCTION mnemo_internal.paused_cron_run(text) IS
'Whether this backend runs a paused pg_cron job (the runners then return at once).';
