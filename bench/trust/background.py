"""bench-trust, the background work beside each part: pg_cron's runs and the sweeps.

A part can pass while what runs beside it fails: during a load run the access sweep
failed six minutes in a row and the suite said passed (issue 46). So after every
part, the sweeps' own ledger (mnemo_internal.lifecycle_runs) and pg_cron's
(cron.job_run_details) are read for failed runs in the part's window, and a failed
run fails the part. The crash part kills the postmaster: a run cut off by that
(a connection or shutdown error) is what it tests, not a failure.

Also here: pausing pg_cron for a check that must not see rows change (the isolation
matrix's fingerprints), and a sampler of what the load's slowest operations wait on.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from contextlib import contextmanager

import psycopg

# What a SIGKILL of the postmaster does to a run in flight (SQLSTATE classes 08, 57).
_CUT_OFF = re.compile(r"terminat|shut ?down|connection|server closed|crash|recovery mode|startup timeout", re.IGNORECASE)


def server_now(dsn: str):
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("SELECT clock_timestamp()").fetchone()[0]


def failed_runs(dsn: str, since, crashes: bool = False) -> list[dict]:
    """The sweeps' and pg_cron's failed runs of Mnemosyne's jobs since `since`; with
    crashes, those cut off by a crash are left out."""
    out = []
    with psycopg.connect(dsn, autocommit=True) as c:
        for sweep, sqlstate, error, n in c.execute(
                "SELECT sweep, sqlstate, left(error, 300), count(*) FROM mnemo_internal.lifecycle_runs"
                " WHERE status = 'failed' AND started_at >= %s GROUP BY 1, 2, 3 ORDER BY 4 DESC", (since,)):
            if not (crashes and (sqlstate or "")[:2] in ("08", "57")):
                out.append({"where": "lifecycle_runs", "job": sweep, "sqlstate": sqlstate, "error": error,
                            "runs": n})
        if c.execute("SELECT to_regclass('cron.job_run_details') IS NOT NULL").fetchone()[0]:
            for job, message, n in c.execute(
                    "SELECT j.jobname, left(d.return_message, 300), count(*) FROM cron.job_run_details AS d"
                    " JOIN cron.job AS j USING (jobid) WHERE j.jobname LIKE 'mnemo-%%'"
                    " AND d.status = 'failed' AND d.start_time >= %s GROUP BY 1, 2 ORDER BY 3 DESC", (since,)):
                if not (crashes and _CUT_OFF.search(message or "")):
                    out.append({"where": "cron.job_run_details", "job": job, "error": message, "runs": n})
    return out


@contextmanager
def cron_paused(dsn: str, quiet_s: float = 3.0):
    """Mnemosyne's pg_cron jobs paused, and the runs already in flight ended on their
    own: a run polls for up to 45 s (the access sweep), so this waits for every
    pg_cron backend to go idle, then for quiet_s more with none (pg_cron reads its
    job list asynchronously and may start a run just after the pause)."""
    with psycopg.connect(dsn, autocommit=True) as owner:
        if owner.execute("SELECT to_regclass('cron.job') IS NULL").fetchone()[0]:
            yield
            return
        paused = [r[0] for r in owner.execute(
            "UPDATE cron.job SET active = false WHERE jobname LIKE 'mnemo-%' AND active RETURNING jobid")]
        try:
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < quiet_s:
                busy = owner.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_cron'"
                                     " AND state <> 'idle' AND pid <> pg_backend_pid()").fetchone()[0]
                if busy:
                    quiet_since = time.monotonic()
                time.sleep(0.25)
            yield
        finally:
            owner.execute("UPDATE cron.job SET active = true WHERE jobid = ANY (%s)", (paused,))


class WaitSampler(threading.Thread):
    """Samples what the backends of one application name are doing, every `every`
    seconds: (API function, wait event or CPU) -> samples. The slowest operations'
    top waits show a lock that serializes them (the per-tenant formation lock, once)."""

    def __init__(self, dsn: str, application_name: str, every: float = 0.05):
        super().__init__(daemon=True)
        self.dsn, self.app, self.every = dsn, application_name, every
        self.samples: Counter = Counter()
        self.stopping = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as c:
            while not self.stopping.is_set():
                for query, kind, event in c.execute(
                        "SELECT query, wait_event_type, wait_event FROM pg_stat_activity"
                        " WHERE application_name = %s AND state = 'active'", (self.app,)):
                    m = re.search(r"mnemo\.(\w+)", query or "")
                    self.samples[(m.group(1) if m else "other", f"{kind}:{event}" if kind else "CPU")] += 1
                time.sleep(self.every)

    def stop(self) -> None:
        self.stopping.set()
        self.join()

    def top(self, function: str, n: int = 3) -> list[tuple[str, float]]:
        """The function's n most sampled states, each with its share of its samples."""
        mine = {w: k for (f, w), k in self.samples.items() if f == function}
        total = sum(mine.values()) or 1
        return [(w, round(k / total, 2)) for w, k in sorted(mine.items(), key=lambda x: -x[1])[:n]]
