-- mnemo_internal.stop_if_postmaster_died() -> void
-- Raises 57P02 (crash_shutdown) when this backend's postmaster is gone. PostgreSQL
-- notices a dead postmaster only where a backend waits (latch waits); a loop busy
-- with work never waits, so after a postmaster SIGKILL it went on for a minute and
-- more, still committing, and its attachment to the old shared memory blocked the
-- restart ("pre-existing shared memory block is still in use"). The long loops
-- (mnemo.run_jobs, mnemo.run_sweep) call this between their short batches. A backend
-- runs in the data directory, and while the postmaster lives it is this backend's
-- parent and its pid heads postmaster.pid; an orphan is re-parented to another
-- process (init, a subreaper). Reads one small file: cheap enough for every batch.
CREATE OR REPLACE FUNCTION mnemo_internal.stop_if_postmaster_died()
RETURNS void
LANGUAGE plpython3u
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
import os
try:
    with open('postmaster.pid') as f:
        postmaster = int(f.readline())
except (OSError, ValueError):
    postmaster = None
if os.getppid() != postmaster:
    plpy.error('the postmaster is gone: stopping this run', sqlstate='57P02')
$$;

COMMENT ON FUNCTION mnemo_internal.stop_if_postmaster_died() IS
'Raises 57P02 when the postmaster of this backend has died (for long loops between batches).';
