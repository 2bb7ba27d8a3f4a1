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

from mnemosyne import connect

DSN = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:55432/mnemo")


def _cron_runner(conn: psycopg.Connection, active: bool) -> None:
    has_cron = conn.execute("SELECT to_regclass('cron.job') IS NOT NULL").fetchone()[0]
    if has_cron:
        conn.execute("UPDATE cron.job SET active = %s WHERE jobname = 'mnemo-run-jobs'", (active,))


@pytest.fixture(scope="session", autouse=True)
def paused_cron_runner():
    with psycopg.connect(DSN, autocommit=True) as conn:
        _cron_runner(conn, False)
        # Wait for a run already in progress to finish (it holds worker 0's lock).
        for _ in range(240):
            if conn.execute("SELECT pg_try_advisory_lock(hashtext('mnemo.run_jobs'), 0)").fetchone()[0]:
                conn.execute("SELECT pg_advisory_unlock(hashtext('mnemo.run_jobs'), 0)")
                break
            time.sleep(0.5)
        try:
            yield
        finally:
            _cron_runner(conn, True)


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
