"""Helpers that several modules of tests/py/db/ share (their fixtures: conftest.py)."""

from __future__ import annotations

import json
import time
import uuid
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
        # On Citus the wait is on a worker, in a backend of pid's distributed transaction
        # (citus_stat_activity: the same global pid), not in pid itself.
        citus = conn.execute("SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')").fetchone()[0]
        query = ("SELECT EXISTS (SELECT FROM citus_stat_activity WHERE wait_event_type = 'Lock'"
                 " AND global_pid = citus_calculate_gpid("
                 "(SELECT nodeid FROM pg_dist_node WHERE groupid = 0), %s))" if citus else
                 "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s")
        while time.monotonic() < deadline and running():
            row = conn.execute(query, (pid,)).fetchone()
            if row and row[0]:
                return True
            time.sleep(0.05)
    return False


# ------------------------------------------------ compile_context tests (test_context*.py)
def secret_marker(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10].upper()}"


def tool_call(call_id: str, name: str, args: dict | None = None) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args or {})}}


def assistant_calls(db, tenant, session, *calls, content=None, **kw) -> int:
    return db.record_message(tenant, session, {"role": "assistant", "content": content,
                                               "tool_calls": list(calls)}, **kw)


def tool_result(db, tenant, session, call_id: str, content: str, **kw) -> int:
    return db.record_message(tenant, session,
                             {"role": "tool", "tool_call_id": call_id, "content": content}, **kw)


def pin_memory(db, tenant: str, memory_id: int) -> None:
    db._call("UPDATE mnemo.memories SET is_pinned = true"
             " WHERE tenant_id = %(t)s AND memory_id = %(m)s", {"t": tenant, "m": memory_id})


def prompt_cost(messages: list[dict], system_prompt: str | None) -> int:
    """Tokens of the returned messages, less the session's own system prompt."""
    if system_prompt is not None:
        assert messages[0] == {"role": "system", "content": system_prompt}
        messages = messages[1:]
    return sum(tokens.count_message(m) for m in messages)


def context_log(db, tenant: str) -> list[tuple]:
    with db.conn.cursor() as cur:
        cur.execute("SELECT context_id, session_id, budget, tokens_used, query, task_type,"
                    " items, omissions, provenance FROM mnemo.context_log"
                    " WHERE tenant_id = %s ORDER BY context_id", (tenant,))
        return cur.fetchall()


def big_output(min_bytes: int, first_line: str = "") -> str:
    lines = [first_line] if first_line else []
    i = 0
    while sum(len(x) + 1 for x in lines) <= min_bytes:
        lines.append(f"2026-03-0{i % 9 + 1} 12:{i % 60:02d}:00 INFO worker-{i % 7} "
                     f"processed batch {i} from /var/spool/jobs/{i}.json in {i % 97} ms")
        i += 1
    return "\n".join(lines) + "\nfinished: ERR_NONE"
