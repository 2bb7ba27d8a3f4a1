"""Helpers that several modules of tests/py/db/ share (their fixtures: conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
from mnemo_db import tokens

from mnemosyne import default_dsn


def run_jobs(db, *tenants: str) -> None:
    """Run queued jobs until these tenants' are done (embeddings, access statistics).

    A separate worker number: pg_cron's runner (worker 0) may be running beside us.
    Memory extraction is not run: these tests place the memories they need themselves
    (extraction has its own tests in test_formation.py)."""
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = ANY(%(t)s) AND kind = 'extract' AND status = 'queued'",
             {"t": list(tenants)})
    for _ in range(600):
        db.run_jobs(worker=11)
        if not db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = ANY(%(t)s)"
                        " AND status = 'queued'", {"t": list(tenants)}):
            return
        time.sleep(0.2)
    raise AssertionError(f"jobs of {tenants} still queued")


def say(db, tenant, session, role: str, content: str, **kw) -> int:
    return db.record_message(tenant, session, {"role": role, "content": content}, **kw)


def assert_tool_pairs_whole(messages: list[dict]) -> None:
    """Each assistant tool call group is followed by exactly its results, in call
    order, and a tool message only ever follows the assistant message that issued
    its call."""
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"tool message {i} does not follow its assistant call"
        i += 1
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [tc["id"] for tc in m["tool_calls"]]
            assert len(set(ids)) == len(ids)
            answered = []
            while i < len(messages) and messages[i]["role"] == "tool":
                answered.append(messages[i]["tool_call_id"])
                i += 1
            assert answered == ids, (ids, answered)  # all of them, in call order


def text_of(messages: list[dict]) -> str:
    return "\n".join(tokens.content_text(m.get("content")) for m in messages)


def waits_for_a_lock(pid: int, running: Callable[[], bool] = lambda: True, seconds: float = 60) -> bool:
    """Whether backend `pid` comes to wait for a lock (another transaction holds what
    it needs) within `seconds`; False at once when `running()` turns False."""
    deadline = time.monotonic() + seconds
    with psycopg.connect(default_dsn(), autocommit=True) as conn:
        while time.monotonic() < deadline and running():
            row = conn.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                               (pid,)).fetchone()
            if row and row[0]:
                return True
            time.sleep(0.05)
    return False
