"""Fixtures for the tests of tests/py/db/, which commit: a real PostgreSQL with
Mnemosyne deployed (tests/py/unit/ needs none, and so does not see these fixtures).

DATABASE_URL points at it (the Makefile sets it to the local cluster by default).
Tests use their own random tenants, so they never see each other's data. pg_cron's
jobs are paused for the session and its runs in flight ended; tests still run jobs as
workers of their own and wait for their tenant's jobs only (drain_jobs), never for the
whole queue, so another runner beside them changes nothing.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from fake_llm import responder, serve, server_reaches

from mnemosyne import connect, default_dsn

DSN = default_dsn()


def _cron_jobs(conn: psycopg.Connection, active: bool) -> None:
    """Pauses (or resumes) Mnemosyne's pg_cron jobs: the job runner and the lifecycle
    sweeps, whose real-clock runs would otherwise change other tests' data midway. The
    runners read the flag themselves (mnemo_internal.paused_cron_run): pg_cron's cached
    job list can miss this UPDATE."""
    has_cron = conn.execute("SELECT to_regclass('cron.job') IS NOT NULL").fetchone()[0]
    if has_cron:
        conn.execute("UPDATE cron.job SET active = %s WHERE jobname LIKE 'mnemo-%%'", (active,))


def _stop_cron_runs(conn: psycopg.Connection) -> None:
    """Ends the runs pg_cron has in flight for Mnemosyne's jobs, and waits until none
    runs. Pausing cron.job stops only new runs: a run in flight went on beside the
    tests (a job runner for up to its 45 s deadline) and took their jobs midway. Every
    Mnemosyne job is made to be killed: a job runner's claims go back to the queue with
    its open batch, and a sweep keeps its committed batches. A run that pg_cron
    launched just as the jobs were paused (it reads cron.job asynchronously) starts a
    moment later, so the check must see no run for a few seconds in a row, not once."""
    quiet = 0
    for _ in range(600):
        ended = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE backend_type = 'pg_cron' AND query LIKE 'CALL mnemo.%'").fetchone()[0]
        quiet = quiet + 1 if ended == 0 else 0
        if quiet >= 6:
            return
        time.sleep(0.5)
    raise RuntimeError("pg_cron keeps starting Mnemosyne jobs although they are paused")


def is_local_cluster() -> bool:
    """Whether DATABASE_URL is the local cluster this checkout owns (scripts/cluster.sh),
    the only server a test may crash or restart."""
    home, port = os.environ.get("MNEMO_HOME"), os.environ.get("MNEMO_PORT")
    return bool(home and port and DSN == f"postgresql://postgres@127.0.0.1:{port}/mnemo"
                and Path(home, "pgdata", "PG_VERSION").exists())


def drain_jobs(db, tenant: str, worker: int, **run_args) -> None:
    """Runs jobs as `worker` until none of the tenant's is queued and due. Another
    runner (pg_cron's, another test's) may hold some of them: it finishes them, or
    gives them back, so this waits for the tenant's own jobs, never for the queue."""
    for _ in range(600):
        db.run_jobs(worker=worker, **run_args)
        if not db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'"
                        " AND run_after <= now()", {"t": tenant}):
            return
        time.sleep(0.1)
    raise AssertionError(f"jobs of {tenant} still queued")


def citus_skips() -> dict[str, str]:
    """tests/citus-skips.txt: the tests that cannot hold on Citus, with their reason
    ('<file>[::<test>]  <reason>' a line)."""
    path = Path(__file__).resolve().parents[2] / "citus-skips.txt"
    entries = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            test, _, reason = line.partition("  ")
            entries[test.strip()] = reason.strip()
    return entries


def pytest_collection_modifyitems(config, items):
    """On a database with the citus extension (make test-citus), the tests listed in
    tests/citus-skips.txt skip with their reason; elsewhere nothing changes."""
    skips = {k: v for k, v in citus_skips().items() if k.startswith("tests/py/")}
    if not skips or not any(i.nodeid.split("::")[0] in {k.split("::")[0] for k in skips} for i in items):
        return
    try:
        with psycopg.connect(DSN, autocommit=True, connect_timeout=10) as conn:
            if not conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'citus'").fetchone()[0]:
                return
    except psycopg.OperationalError:
        return  # no server: the tests say so themselves
    for item in items:
        nodeid = item.nodeid.split("[")[0]
        for key, reason in skips.items():
            if nodeid == key or ("::" not in key and nodeid.split("::")[0] == key):
                item.add_marker(pytest.mark.skip(reason=f"on Citus: {reason}"))


@pytest.fixture(scope="session", autouse=True)
def paused_cron_runner():
    with psycopg.connect(DSN, autocommit=True) as conn:
        _cron_jobs(conn, False)
        _stop_cron_runs(conn)
    try:
        yield
    finally:
        # a fresh connection: a test may have restarted the local cluster
        with psycopg.connect(DSN, autocommit=True) as conn:
            _cron_jobs(conn, True)


@pytest.fixture()
def db():
    with connect(DSN) as client:
        yield client


@pytest.fixture()
def tenant(db):
    tid = "t_" + uuid.uuid4().hex[:12]
    db.create_tenant(tid)
    return tid


@pytest.fixture()
def session(db, tenant):
    return db.start_session(tenant, context_window=8192)


@pytest.fixture()
def drop_leftover_jobs(db, tenant):
    """Jobs a test left queued are dropped afterwards, so later runners skip them
    (modules use it with pytestmark = pytest.mark.usefixtures("drop_leftover_jobs"))."""
    yield
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'", {"t": tenant})


@pytest.fixture()
def fake_llm(db):
    """start(mode or respond, good=None, timeout=5.0, retries=2, enabled=True): a fake
    OpenAI-compatible server (fake_llm.py) configured as the helper LLM, with short
    backoff; the configuration is removed afterwards. The timeout leaves a loaded
    machine time to answer (a test of timeouts sets a short one)."""
    servers = []

    def start(mode, good=None, timeout=5.0, retries=2, enabled=True):
        srv = serve(responder(mode, good) if isinstance(mode, str) else mode)
        servers.append(srv)
        if not server_reaches(DSN, srv.server_address[1]):
            pytest.skip("the server cannot reach this machine's 127.0.0.1, where the fake LLM listens"
                        " (a container on a bridge network, or another host)")
        db.set_helper_llm(f"http://127.0.0.1:{srv.server_address[1]}/v1", "tiny-model",
                          "sk-test-key-0123456789abcdefghij", timeout_s=timeout, max_retries=retries,
                          backoff_s=0.05, enabled=enabled)
        return srv

    yield start
    db.set_helper_llm(None)
    for srv in servers:
        srv.shutdown()
