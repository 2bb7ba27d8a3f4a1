"""Growing a Citus cluster under write load (issue 45, "Growing the cluster"): what
make bench-citus and tests/py/db/test_citus.py share.

On the local cluster of scripts/citus.sh, a worker is added (scripts/citus.sh
add-worker) and the shards are rebalanced onto it (citus_rebalance_start, then
citus_rebalance_wait) while writers record messages through the API, one connection
and one shard group's tenants each, and a job runner runs the jobs those writes
enqueue. Afterwards every acknowledged write must be in the database exactly once,
the jobs of the writers' tenants must all complete, and the worker is removed again
(scripts/citus.sh remove-worker: drained, the others evened), leaving the node set
as it was.

Shard transfer mode: block_writes. Citus's default ('auto') moves a shard group by
logical replication, writes going on meanwhile, but a publication cannot hold an
UNLOGGED table, and the working memory (mnemo.working_memory's partitions,
mnemo_internal.working_memory_built) is UNLOGGED by design: the move fails ("cannot
add relation ... to publication ... not supported for unlogged tables") and the
background job retries it forever. block_writes copies the group with COPY while
writes wait (they are not refused): the group's, and, as Citus also locks the
reference tables the group's tables reference (mnemo.tenants), every other tenant's.
(Every distributed and reference table has a primary key, so a replica identity is
not the obstacle; with the working memory set LOGGED, 'auto' moves online:
transfer=, docs/operations.md.) Strategy: by_shard_count, which evens the shard
groups; the default, by_disk_size, may keep a small test cluster's few groups where
they are.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

import psycopg

from mnemosyne import connect

ROOT = Path(__file__).resolve().parents[1]
TRANSFER = "block_writes"
STRATEGY = "by_shard_count"


def local_cluster(dsn: str) -> tuple[str, int] | None:
    """($MNEMO_HOME, the coordinator's port) when dsn is the coordinator of the local
    cluster of scripts/citus.sh that this checkout runs (the only cluster whose nodes a
    test may add and remove), else None."""
    home = os.environ.get("MNEMO_HOME")
    pid = Path(home or "/nonexistent", "citus", "coordinator", "pgdata", "postmaster.pid")
    try:
        port = int(pid.read_text().splitlines()[3])
    except (OSError, IndexError, ValueError):
        return None
    return (home, port) if dsn == f"postgresql://postgres@127.0.0.1:{port}/mnemo" else None


def citus_sh(home: str, base: int, *args: str) -> str:
    env = {**os.environ, "MNEMO_HOME": home, "MNEMO_CITUS_PORT": str(base)}
    return subprocess.run([str(ROOT / "scripts" / "citus.sh"), *args], env=env, check=True,
                          capture_output=True, text=True).stdout


def workers(conn) -> list[int]:
    return [r[0] for r in conn.execute(
        "SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary' ORDER BY 1")]


@contextmanager
def added_worker(dsn: str):
    """A new worker on the local cluster (scripts/citus.sh add-worker), yielding its
    port; removed on the way out (scripts/citus.sh remove-worker), whatever happened."""
    home, base = local_cluster(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = workers(conn)
        citus_sh(home, base, "add-worker")
        port = next(p for p in workers(conn) if p not in before)
    try:
        yield port
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:  # a rebalance a failure left running
            conn.execute("SELECT citus_rebalance_stop() FROM pg_dist_background_job"
                         " WHERE state IN ('scheduled', 'running') LIMIT 1")
        citus_sh(home, base, "remove-worker", str(port - base))


def node_of(conn, tenant: str) -> int:
    """The port of the worker holding the tenant's shard group."""
    return conn.execute(
        "SELECT n.nodeport FROM pg_dist_placement AS p JOIN pg_dist_node AS n USING (groupid)"
        " WHERE p.shardid = get_shard_id_for_distribution_column('mnemo.sessions', %s::text)",
        [tenant]).fetchone()[0]


def tenants_by_group(conn, prefix: str, per_group: int) -> list[list[tuple[str, str]]]:
    """Tenants (with a session each) until every shard group of mnemo.sessions has
    per_group of them: [(tenant, session id), ...] per group."""
    shards = [r[0] for r in conn.execute(
        "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'mnemo.sessions'::regclass ORDER BY 1")]
    groups: dict[int, list[tuple[str, str]]] = {s: [] for s in shards}
    for i in range(1000):
        if all(len(g) >= per_group for g in groups.values()):
            break
        tenant = f"{prefix}_{i}"
        shard = conn.execute("SELECT get_shard_id_for_distribution_column('mnemo.sessions', %s::text)",
                             [tenant]).fetchone()[0]
        if len(groups[shard]) < per_group:
            conn.execute("SELECT mnemo.create_tenant(%s)", [tenant])
            sid = conn.execute("SELECT mnemo.start_session(%s)", [tenant]).fetchone()[0]
            groups[shard].append((tenant, str(sid)))
    return list(groups.values())


class Writers:
    """One thread per group of tenants, each on its own connection, recording
    messages through the API round-robin over its tenants until stopped; a write is
    acknowledged when record_message returned. A failed call is kept with its error
    and retried, as a client would, with a new connection (up to TRIES times): a
    failed call that had written its message would then be there twice."""

    TRIES = 5

    def __init__(self, dsn: str, groups: list[list[tuple[str, str]]], run: str, pause: float):
        self.dsn, self.groups, self.run, self.pause = dsn, groups, run, pause
        self.acked: list[tuple[int, str, str, float]] = []  # (writer, tenant, content, when)
        self.failed: list[tuple[str, str, str]] = []  # (tenant, content, error), each try
        self.gave_up: list[tuple[str, str]] = []  # (tenant, content) never acknowledged
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(w, g), daemon=True)
                        for w, g in enumerate(groups)]

    def _write(self, w: int, group: list[tuple[str, str]]) -> None:
        db, i = connect(self.dsn), 0
        try:
            while not self.stop.is_set():
                tenant, sid = group[i % len(group)]
                content = f"{self.run} w{w} n{i}: the deploy moved to shard group {w} at step {i}"
                for _ in range(self.TRIES):
                    try:
                        db.record_message(tenant, sid, {"role": "user", "content": content})
                        self.acked.append((w, tenant, content, time.monotonic()))
                        break
                    except psycopg.Error as e:
                        self.failed.append((tenant, content, f"{e.sqlstate} {str(e).splitlines()[0]}"))
                        db.close()
                        db = connect(self.dsn)
                        time.sleep(0.2)
                else:
                    self.gave_up.append((tenant, content))
                i += 1
                time.sleep(self.pause)
        finally:
            db.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


class JobRunner(threading.Thread):
    """The job runner through the coordinator (CALL mnemo.run_jobs, as pg_cron's is),
    beside the writers and the move, until stopped; its errors are kept."""

    def __init__(self, dsn: str):
        super().__init__(daemon=True)
        self.dsn, self.stop, self.errors, self.calls = dsn, threading.Event(), [], 0

    def run(self) -> None:
        db = connect(self.dsn)
        while not self.stop.is_set():
            try:
                db.run_jobs(worker=44, max_batches=2)
                self.calls += 1
            except psycopg.Error as e:
                self.errors.append(f"{type(e).__name__}: {e}")
                db.close()
                db = connect(self.dsn)
            time.sleep(0.2)
        db.close()


def rebalance_under_writes(dsn: str, new_worker: int, *, writers: int = 4, per_group: int = 2,
                           before: float = 3.0, after: float = 3.0, pause: float = 0.02,
                           timeout: int = 600, transfer: str = TRANSFER, log=print) -> dict:
    """With a worker just added (no shards yet): writers (one per shard group, at most
    `writers`) and a job runner run for `before` seconds, the shards are rebalanced
    (block_writes, by_shard_count) and waited for, they run `after` seconds more and
    stop; then the tenants' jobs are run to the end. Returns the figures: writes/s
    before, during and after the move, its duration, the longest a writer waited for
    one write, the writes acknowledged, lost (acknowledged, absent) and duplicated
    (present more than once), the calls that failed (each retried) and the writes given
    up after TRIES, the shard groups and tenants
    moved (and where their calls now run), the jobs by status."""
    run = "rb" + uuid.uuid4().hex[:8]
    with psycopg.connect(dsn, autocommit=True) as admin:
        groups = tenants_by_group(admin, run, per_group)[:writers]
        tenants = [t for g in groups for t, _ in g]
        home_before = {t: node_of(admin, t) for t in tenants}
        runner = JobRunner(dsn)
        runner.start()
        with Writers(dsn, groups, run, pause) as w:
            t_start = time.monotonic()
            time.sleep(before)
            t0 = time.monotonic()
            job = admin.execute("SELECT citus_rebalance_start(rebalance_strategy => %s, shard_transfer_mode => %s)",
                                [STRATEGY, transfer]).fetchone()[0]
            admin.execute(f"SET statement_timeout = '{timeout}s'")
            try:
                admin.execute("SELECT citus_rebalance_wait()")
            finally:
                admin.execute("RESET statement_timeout")
            t1 = time.monotonic()
            time.sleep(after)
            t_end = time.monotonic()
        runner.stop.set()
        runner.join()
        state, tasks = admin.execute(
            "SELECT j.state, (SELECT count(*) FROM pg_dist_background_task AS t WHERE t.job_id = j.job_id)"
            " FROM pg_dist_background_job AS j WHERE j.job_id = %s", [job]).fetchone()
        admin.execute("CALL citus_cleanup_orphaned_resources()")  # the moved shards' old copies
        log(f"rebalance job {job} {state} in {t1 - t0:.1f} s ({tasks} tasks);"
            f" {len(w.acked)} writes acknowledged, {len(w.failed)} failed")

        present = Counter(dict(admin.execute(
            "SELECT tenant_id || ' ' || content, count(*) FROM mnemo.messages"
            " WHERE tenant_id = ANY (%s) AND content LIKE %s GROUP BY 1", [tenants, run + " %"]).fetchall()))
        acked = Counter(f"{t} {c}" for _, t, c, _ in w.acked)
        lost = sorted(k for k in acked if present[k] == 0)
        duplicated = sorted(k for k, n in present.items() if n > 1)

        jobs_start = time.monotonic()
        drain = connect(dsn)
        for _ in range(600):  # the runner's work, finished after the move
            if not admin.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = ANY (%s)"
                                 " AND status = 'queued' AND run_after <= now()", [tenants]).fetchone()[0]:
                break
            drain.run_jobs(worker=45, max_batches=20)
        drain.close()
        jobs = dict(admin.execute("SELECT kind || ':' || status, count(*) FROM mnemo.jobs"
                                  " WHERE tenant_id = ANY (%s) GROUP BY 1", [tenants]).fetchall())
        embedded = admin.execute("SELECT count(*) FILTER (WHERE embedding IS NOT NULL), count(*)"
                                 " FROM mnemo.messages WHERE tenant_id = ANY (%s)", [tenants]).fetchone()
        home_after = {t: node_of(admin, t) for t in tenants}

    def rate(a: float, b: float) -> float:
        return round(sum(1 for *_, at in w.acked if a <= at < b) / (b - a), 1) if b > a else 0.0

    def longest_gap(ats: list[float]) -> float:
        return max((b - a for a, b in pairwise(ats)), default=0.0)

    # the longest one writer waited between two acknowledgements (a moving group's
    # writes wait for the copy), and the longest no writer got one (the whole cluster)
    longest = max(longest_gap([at for v, *_, at in w.acked if v == k]) for k in range(len(groups)))
    stall = longest_gap(sorted(at for *_, at in w.acked))
    moved = sorted(t for t in tenants if home_after[t] != home_before[t])
    return {
        "transfer": transfer, "job_state": state, "rebalance_s": round(t1 - t0, 1), "tasks": tasks,
        "writers": len(groups), "tenants": len(tenants),
        "writes_per_s_before": rate(t_start, t0), "writes_per_s_during": rate(t0, t1),
        "writes_per_s_after": rate(t1, t_end), "longest_write_wait_s": round(longest, 2),
        "longest_stall_all_writers_s": round(stall, 2),
        "acknowledged": len(w.acked), "lost": len(lost), "duplicated": len(duplicated),
        "failed": len(w.failed), "gave_up": len(w.gave_up),
        "failures": sorted({e for *_, e in w.failed})[:5], "runner_errors": runner.errors[:5],
        "tenants_moved": moved, "moved_to": sorted({home_after[t] for t in moved}),
        "on_new_worker": sorted(t for t in tenants if home_after[t] == new_worker),
        "jobs": jobs, "jobs_s": round(time.monotonic() - jobs_start, 1),
        "messages_embedded": list(embedded), "lost_examples": lost[:3], "duplicated_examples": duplicated[:3],
    }
