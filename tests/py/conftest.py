"""Fixtures for tests that commit: a real PostgreSQL with Mnemosyne deployed.

DATABASE_URL points at it (the Makefile sets it to the local cluster by default).
Tests use their own random tenants, so they never see each other's data. pg_cron's
job runner is paused for the session so that job tests see only their own runners.
"""

from __future__ import annotations

import os
import time
import uuid

import psycopg
import pytest
from fake_llm import responder, serve, server_reaches

from mnemosyne import connect

DSN = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:55432/mnemo")


def _cron_jobs(conn: psycopg.Connection, active: bool) -> None:
    """Pauses (or resumes) Mnemosyne's pg_cron jobs: the job runner and the lifecycle
    sweeps, whose real-clock runs would otherwise change other tests' data midway."""
    has_cron = conn.execute("SELECT to_regclass('cron.job') IS NOT NULL").fetchone()[0]
    if has_cron:
        conn.execute("UPDATE cron.job SET active = %s WHERE jobname LIKE 'mnemo-%%'", (active,))


def _wait_for_cron_runs(conn: psycopg.Connection) -> None:
    """Waits until pg_cron runs no Mnemosyne job. A run that pg_cron launched just as
    the jobs were paused (it reads cron.job asynchronously) starts a moment later, so
    the check must see no run for a few seconds in a row, not once."""
    if not conn.execute("SELECT to_regclass('cron.job_run_details') IS NOT NULL").fetchone()[0]:
        return
    quiet = 0
    for _ in range(300):
        running = conn.execute(
            "SELECT count(*) FROM cron.job_run_details AS d JOIN cron.job AS j USING (jobid)"
            " WHERE j.jobname LIKE 'mnemo-%' AND d.status IN ('starting', 'running')"
            " AND d.start_time > now() - interval '10 minutes'").fetchone()[0]
        quiet = quiet + 1 if running == 0 else 0
        if quiet >= 6:
            return
        time.sleep(0.5)


def _wait_for_lock(conn: psycopg.Connection, key: str, sub: str) -> None:
    """Waits until a run holding an advisory lock (started by pg_cron) has finished."""
    for _ in range(240):
        if conn.execute(f"SELECT pg_try_advisory_lock(hashtext('{key}'), {sub})").fetchone()[0]:
            conn.execute(f"SELECT pg_advisory_unlock(hashtext('{key}'), {sub})")
            return
        time.sleep(0.5)


@pytest.fixture(scope="session", autouse=True)
def paused_cron_runner():
    with psycopg.connect(DSN, autocommit=True) as conn:
        _cron_jobs(conn, False)
        _wait_for_cron_runs(conn)
        # Wait for runs already in progress to finish (they hold their locks).
        _wait_for_lock(conn, "mnemo.run_jobs", "0")
        for sweep in ("promotion", "expiry", "summaries", "compaction", "partitions",
                      "working_memory", "prune", "segments"):
            _wait_for_lock(conn, "mnemo.run_sweep", f"hashtext('{sweep}')")
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
def fake_llm(db):
    """start(mode or respond, good=None, timeout=0.5, retries=2, enabled=True): a fake
    OpenAI-compatible server (fake_llm.py) configured as the helper LLM, with short
    timeouts and backoff; the configuration is removed afterwards."""
    servers = []

    def start(mode, good=None, timeout=0.5, retries=2, enabled=True):
        srv = serve(responder(mode, good) if isinstance(mode, str) else mode)
        servers.append(srv)
        if not server_reaches(DSN, srv.server_address[1]):
            pytest.skip("the server cannot reach this machine's 127.0.0.1, where the fake LLM listens"
                        " (a container on a bridge network, or another host)")
        db._call("SELECT mnemo.set_helper_llm(%(u)s, 'tiny-model', 'sk-test-key-0123456789abcdefghij',"
                 " %(to)s::real, %(r)s::integer, 0.05, %(e)s)",
                 {"u": f"http://127.0.0.1:{srv.server_address[1]}/v1", "to": timeout, "r": retries,
                  "e": enabled})
        return srv

    yield start
    db._call("SELECT mnemo.set_helper_llm(NULL)", {})
    for srv in servers:
        srv.shutdown()
