"""Lifecycle sweeps against the real database, with a controlled clock (issue 5).

Each sweep runs as `CALL mnemo.run_sweep(name, p_now, p_tenant_id)`: scoped to the
test's own tenant (partitions are global: those tests use months decades ago), and
committed batch by batch, as pg_cron runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from conftest import DSN
from consistency import violations
from helpers import assert_tool_pairs_whole, waits_for_a_lock
from lifecycle_checks import check_levels
from mnemo_db import tokens

pytestmark = pytest.mark.usefixtures("drop_leftover_jobs")

ROOT = Path(__file__).resolve().parents[3]


def sweep(conn, name: str, now: datetime | None = None, tenant: str | None = None,
          batch: int | None = None) -> None:
    """Runs a sweep to the end. A run of the same sweep elsewhere (a background loop
    still finishing) would make this one return at once without doing anything, so
    wait for its lock first."""
    for _ in range(240):
        if conn.execute("SELECT pg_try_advisory_lock(hashtext('mnemo.run_sweep'), hashtext(%s))",
                        (name,)).fetchone()[0]:
            conn.execute("SELECT pg_advisory_unlock(hashtext('mnemo.run_sweep'), hashtext(%s))", (name,))
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"the {name} sweep's lock stayed taken for 120 s")
    conn.execute("CALL mnemo.run_sweep(%s, coalesce(%s, now()), %s, %s)", (name, now, tenant, batch))


def last_run(conn, name: str) -> dict:
    cur = conn.execute("SELECT status, batches, rows_touched, counts, error FROM mnemo_internal.lifecycle_runs"
                       " WHERE sweep = %s ORDER BY run_id DESC LIMIT 1", (name,))
    cols = [d.name for d in cur.description]
    return dict(zip(cols, cur.fetchone()))


def memory(conn, tenant: str, kind: str, content: str, session=None, **cols) -> int:
    mid = conn.execute("SELECT mnemo_internal.insert_memory(%s, %s, %s, %s)",
                       (tenant, session, kind, content)).fetchone()[0]
    # the access statistics have a table of their own (migrations 0013, 0014)
    access = {k: cols.pop(k) for k in ("access_count", "relevance_accumulator", "last_accessed_at") if k in cols}
    if cols:
        sets = ", ".join(f"{k} = %s" for k in cols)
        conn.execute(f"UPDATE mnemo.memories SET {sets} WHERE tenant_id = %s AND memory_id = %s",
                     (*cols.values(), tenant, mid))
    if access:
        conn.execute(f"INSERT INTO mnemo.memory_access (tenant_id, memory_id, {', '.join(access)})"
                     f" VALUES (%s, %s, {', '.join(['%s'] * len(access))})", (tenant, mid, *access.values()))
    return mid


def row(conn, sql: str, *args):
    cur = conn.execute(sql, args)
    cols = [d.name for d in cur.description]
    r = cur.fetchone()
    return dict(zip(cols, r)) if r else None


NOW = datetime(2031, 3, 10, 12, 0, tzinfo=UTC)


# ------------------------------------------------------------------------------ promotion
def test_promotion_by_utility_with_controlled_clock(db, tenant, session):
    c = db.conn
    t0 = NOW - timedelta(hours=10)
    # U = 0.5 * log2(4) / 1.1 = 0.91 > 0.3, 3 accesses: session -> episodic
    hot = memory(c, tenant, "fact", "The staging database runs on port 6543.", session,
                 access_count=3, relevance_accumulator=1.5, created_at=t0)
    few = memory(c, tenant, "fact", "Only two accesses.", session,
                 access_count=2, relevance_accumulator=2.0, created_at=t0)
    # same accesses, but 1000 hours old: U = 1 / 11 < 0.3
    stale = memory(c, tenant, "fact", "Old and rarely useful.", session,
                   access_count=3, relevance_accumulator=1.5, created_at=NOW - timedelta(hours=1000))
    epi = memory(c, tenant, "fact", "Invoices are issued on the 1st.", session, tier="episodic",
                 scope="global", access_count=12, relevance_accumulator=9.0, created_at=t0)
    pref = memory(c, tenant, "preference", "Prefers short answers.", session, tier="episodic",
                  scope="global", access_count=12, relevance_accumulator=9.0, created_at=t0)
    sweep(c, "promotion", NOW, tenant)
    tiers = dict(c.execute("SELECT memory_id, tier || '/' || scope || '/' || is_validated FROM mnemo.memories"
                           " WHERE tenant_id = %s", (tenant,)).fetchall())
    assert tiers == {hot: "episodic/global/true", few: "session/local/false", stale: "session/local/false",
                     epi: "semantic/global/true", pref: "procedural/global/true"}
    r = row(c, "SELECT expires_at FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s", tenant, hot)
    assert r["expires_at"] == NOW + timedelta(days=90)
    versions = c.execute("SELECT memory_id, change, old_value ->> 'tier', new_value ->> 'tier'"
                         " FROM mnemo.memory_versions WHERE tenant_id = %s ORDER BY memory_id", (tenant,)).fetchall()
    assert versions == [(hot, "promote", "session", "episodic"), (epi, "promote", "episodic", "semantic"),
                        (pref, "promote", "episodic", "procedural")]
    assert last_run(c, "promotion")["counts"]["promoted"] == 3
    # re-running changes nothing: promoted memories do not meet the next tier's rule
    sweep(c, "promotion", NOW, tenant)
    assert last_run(c, "promotion")["counts"]["promoted"] == 0
    assert c.execute("SELECT count(*) FROM mnemo.memory_versions WHERE tenant_id = %s", (tenant,)).fetchone()[0] == 3


# ------------------------------------------------------------------- expiry and demotion
def test_session_expiry_ttl_and_demotion(db, tenant):
    c = db.conn
    sid = db.start_session(tenant, context_window=8192)
    db.record_message(tenant, sid, {"role": "user", "content": "hello"})
    real_now = datetime.now(UTC)
    later = real_now + timedelta(days=8)
    # used an hour before `later`: active enough not to be demoted, so its TTL applies
    note = memory(c, tenant, "note", "Session scratch note.", sid, access_count=2,
                  last_accessed_at=later - timedelta(hours=1))
    pinned = memory(c, tenant, "note", "Pinned in the session.", sid, is_pinned=True)
    idle_epi = memory(c, tenant, "fact", "Rarely used episodic fact.", sid, tier="episodic", scope="global",
                      access_count=1, created_at=later - timedelta(days=30),
                      last_accessed_at=later - timedelta(days=8))
    busy_epi = memory(c, tenant, "fact", "Often used episodic fact.", sid, tier="episodic", scope="global",
                      access_count=50, created_at=later - timedelta(days=30),
                      last_accessed_at=later - timedelta(days=8))
    semantic = memory(c, tenant, "fact", "Semantic facts never expire on their own.", sid, tier="semantic",
                      scope="global", created_at=later - timedelta(days=900))

    # Before the idle limit nothing happens to the session (updated_at is the real now).
    sweep(c, "expiry", real_now + timedelta(hours=1), tenant)
    assert row(c, "SELECT status FROM mnemo.sessions WHERE tenant_id=%s", tenant)["status"] == "active"

    # 8 days later (> 168 h idle): the session expires, its session-tier memories get
    # 24 h of grace; the idle episodic memory (1 access in 192 h < 0.01/h) expires.
    sweep(c, "expiry", later, tenant)
    assert row(c, "SELECT status FROM mnemo.sessions WHERE tenant_id=%s", tenant)["status"] == "expired"
    state = {r[0]: r[1:] for r in c.execute(
        "SELECT memory_id, is_active, expires_at FROM mnemo.memories WHERE tenant_id = %s", (tenant,))}
    assert state[note] == (True, later + timedelta(hours=24))
    assert state[idle_epi][0] is False and state[busy_epi][0] is True and state[semantic][0] is True

    # After the grace period the session's memories expire, except the pinned one.
    sweep(c, "expiry", later + timedelta(hours=25), tenant)
    active = dict(c.execute("SELECT memory_id, is_active FROM mnemo.memories WHERE tenant_id = %s", (tenant,)))
    assert active == {note: False, pinned: True, idle_epi: False, busy_epi: True, semantic: True}
    archived = dict(c.execute("SELECT memory_id, reason FROM mnemo.memory_archive WHERE tenant_id = %s",
                              (tenant,)).fetchall())
    assert set(archived) == {note, idle_epi}
    assert "activity" in archived[idle_epi] and "expires_at" in archived[note]
    snap = row(c, "SELECT snapshot FROM mnemo.memory_archive WHERE tenant_id = %s AND memory_id = %s",
               tenant, note)["snapshot"]
    assert snap["content_full"] == "Session scratch note." and snap["is_active"] is True
    assert {r[0] for r in c.execute("SELECT memory_id FROM mnemo.memory_versions WHERE tenant_id = %s"
                                    " AND change = 'expire'", (tenant,))} == {note, idle_epi}
    # idempotent
    sweep(c, "expiry", later + timedelta(hours=26), tenant)
    assert c.execute("SELECT count(*) FROM mnemo.memory_archive WHERE tenant_id = %s", (tenant,)).fetchone()[0] == 2


# --------------------------------------------------------------------------- summaries
def test_summaries_sweep_fills_the_ladder(db, tenant, session):
    c = db.conn
    log = "\n".join([f"2031-01-01 10:00:{i:02d} INFO step {i} done in {i * 7} ms" for i in range(40)]
                    + ["2031-01-01 10:00:41 ERROR E_DISK_FULL: /var/lib/app/data.db is full (100%)"])
    mid = memory(c, tenant, "tool_result", log, session)
    short = memory(c, tenant, "fact", "Short fact.", session)
    sweep(c, "summaries", NOW, tenant)
    r = row(c, "SELECT content_full, content_detail, tokens_detail, content_compact, tokens_compact, content_stub,"
               " tokens_stub, losses, key_entities FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s",
            tenant, mid)
    levels = {n: {"text": r[f"content_{n}"], "tokens": r[f"tokens_{n}"], "losses": r["losses"][n]}
              for n in ("detail", "compact", "stub") if r[f"content_{n}"]}
    assert "detail" in levels and "E_DISK_FULL" in levels["detail"]["text"]
    check_levels(r["content_full"], levels)
    assert "E_DISK_FULL" in r["key_entities"]
    s = row(c, "SELECT content_detail, losses FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s",
            tenant, short)
    assert s == {"content_detail": None, "losses": {}}  # too short to summarise
    sweep(c, "summaries", NOW, tenant)
    assert last_run(c, "summaries")["rows_touched"] == 0


# -------------------------------------------------------------------------- compaction
def _log_output(i: int, lines: int = 30) -> str:
    steps = [f"2031-02-01 09:{i % 60:02d}:{k:02d} INFO build step {k} of job-{i} ok ({k * 3} ms)"
             for k in range(lines)]
    error = f"2031-02-01 09:{i % 60:02d}:59 ERROR job-{i} failed: E_TEST_{i} in tests/test_mod_{i}.py:{10 + i}"
    return "\n".join([*steps, error])


def _turns(db, tenant, sid, start: int, cycles: int, lines: int = 30) -> None:
    for i in range(start, start + cycles):
        db.record_message(tenant, sid, {"role": "user", "content": f"Run the tests for module {i} please."})
        db.record_message(tenant, sid, {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "shell", "arguments": json.dumps({"cmd": f"pytest tests/test_mod_{i}.py"})}}]})
        db.record_message(tenant, sid, {"role": "tool", "tool_call_id": f"call_{i}",
                                        "content": _log_output(i, lines)})
        db.record_message(tenant, sid, {"role": "assistant",
                                        "content": f"Module {i} fails with E_TEST_{i}; I fixed tests/test_mod_{i}.py."})


def active_tokens(conn, tenant, sid) -> int:
    return conn.execute("SELECT coalesce(sum(token_count), 0) FROM mnemo.messages WHERE tenant_id = %s"
                        " AND session_id = %s AND NOT is_compacted AND NOT is_pruned", (tenant, sid)).fetchone()[0]


def check_compaction_consistent(conn, tenant) -> None:
    """Every compacted message points at a summary message of its session that has its
    compaction_log row and summary memory; every summary message is logged; no tool
    result is active while its call is compacted."""
    bad = conn.execute("""
        SELECT m.message_id FROM mnemo.messages AS m
        LEFT JOIN mnemo.messages AS s ON s.tenant_id = m.tenant_id AND s.message_id = m.compacted_into
            AND s.session_id = m.session_id AND s.role = 'system' AND s.turn_index = -1
        LEFT JOIN mnemo.compaction_log AS l ON l.tenant_id = m.tenant_id AND l.summary_message_id = m.compacted_into
        WHERE m.tenant_id = %s AND m.is_compacted AND (s.message_id IS NULL OR l.compaction_id IS NULL)""",
        (tenant,)).fetchall()
    assert bad == []
    unlogged = conn.execute("""
        SELECT s.message_id FROM mnemo.messages AS s
        WHERE s.tenant_id = %s AND s.turn_index = -1 AND NOT EXISTS (
            SELECT FROM mnemo.compaction_log AS l JOIN mnemo.memories AS mm
                ON mm.tenant_id = l.tenant_id AND mm.memory_id = l.summary_memory_id AND mm.kind = 'summary'
            WHERE l.tenant_id = s.tenant_id AND l.summary_message_id = s.message_id)""", (tenant,)).fetchall()
    assert unlogged == []
    counts = conn.execute("""
        SELECT l.summary_message_id, l.messages_compacted,
            (SELECT count(*) FROM mnemo.messages AS m WHERE m.tenant_id = l.tenant_id
                AND m.compacted_into = l.summary_message_id)
        FROM mnemo.compaction_log AS l WHERE l.tenant_id = %s""", (tenant,)).fetchall()
    assert all(n == k for _, n, k in counts)
    stranded = conn.execute("""
        SELECT t.message_id FROM mnemo.messages AS t
        JOIN mnemo.tool_calls AS tc ON tc.tenant_id = t.tenant_id AND tc.session_id = t.session_id
            AND tc.tool_call_id = t.tool_call_id
        JOIN mnemo.messages AS a ON a.tenant_id = tc.tenant_id AND a.message_id = tc.message_id
        WHERE t.tenant_id = %s AND t.role = 'tool' AND NOT t.is_compacted AND a.is_compacted""",
        (tenant,)).fetchall()
    assert stranded == []


def test_compaction_output_and_flags(db, tenant):
    c = db.conn
    sid = db.start_session(tenant, context_window=1500, response_reserve=200)
    _turns(db, tenant, sid, 0, 12)
    db.record_message(tenant, sid, {"role": "user", "content": "My API key is sk-SECRET-123."},
                      sensitivity="secret")
    _turns(db, tenant, sid, 12, 2)
    before = active_tokens(c, tenant, sid)
    assert before > 3000
    sweep(c, "compaction", NOW, tenant)
    check_compaction_consistent(c, tenant)
    # the fuzz's consistency checks hold after a compaction (pg_cron's sweep compacted a
    # fuzzed session during bench-trust's 100k run: its summary is turn -1, not embedded)
    assert violations(c, tenant) == {}
    log = row(c, "SELECT * FROM mnemo.compaction_log WHERE tenant_id = %s", tenant)
    assert log["active_tokens_before"] == before
    after = active_tokens(c, tenant, sid)
    assert after == log["active_tokens_after"] <= 1500 + log["summary_tokens"] + 400
    assert log["ratio"] >= 5 and log["ratio"] == pytest.approx(log["tokens_removed"] / log["summary_tokens"], 1e-4)
    summary = row(c, "SELECT message_id, role, turn_index, content, token_count, sensitivity, created_at"
                     " FROM mnemo.messages WHERE tenant_id = %s AND turn_index = -1", tenant)
    assert summary["message_id"] == log["summary_message_id"] and summary["role"] == "system"
    assert summary["created_at"] == NOW and summary["content"].startswith("[Conversation summary: turns 0-")
    assert summary["token_count"] == tokens.count_message({"role": "system", "content": summary["content"]})
    assert "sk-SECRET-123" not in summary["content"]
    flagged = c.execute("SELECT min(turn_index), max(turn_index), count(*) FROM mnemo.messages WHERE tenant_id = %s"
                        " AND compacted_into = %s", (tenant, summary["message_id"])).fetchone()
    assert flagged[0] == 0 and flagged[1] == log["last_turn"] and flagged[2] == log["messages_compacted"]
    sess = row(c, "SELECT summary_text, summary_upto_turn, summary_embedding IS NOT NULL AS emb FROM mnemo.sessions"
                  " WHERE tenant_id = %s", tenant)
    assert sess == {"summary_text": summary["content"], "summary_upto_turn": log["last_turn"], "emb": True}
    mem = row(c, "SELECT * FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s",
              tenant, log["summary_memory_id"])
    assert mem["kind"] == "summary" and mem["session_id"] == sid
    assert sorted(mem["source_message_ids"]) == [r[0] for r in c.execute(
        "SELECT message_id FROM mnemo.messages WHERE tenant_id = %s AND compacted_into = %s ORDER BY 1",
        (tenant, summary["message_id"]))]
    levels = {n: {"text": mem[f"content_{n}"], "tokens": mem[f"tokens_{n}"], "losses": mem["losses"][n]}
              for n in ("detail", "compact", "stub") if mem[f"content_{n}"]}
    check_levels(mem["content_full"], levels)
    assert mem["tokens_full"] == tokens.count(mem["content_full"])
    assert "sk-SECRET-123" not in mem["content_full"]
    # compile_context reads the summary as the oldest active history, within budget
    bundle = db.compile_context_bundle(tenant, sid, "which module failed?")
    assert bundle["report"]["tokens"]["total"] <= bundle["report"]["budget"]["available"]
    assert_tool_pairs_whole(bundle["messages"])
    # a second sweep has nothing to do
    sweep(c, "compaction", NOW, tenant)
    assert c.execute("SELECT count(*) FROM mnemo.compaction_log WHERE tenant_id = %s", (tenant,)).fetchone()[0] == 1
    # more turns: the next compaction rolls the previous summary into the new one
    _turns(db, tenant, sid, 14, 12)
    sweep(c, "compaction", NOW + timedelta(hours=1), tenant)
    check_compaction_consistent(c, tenant)
    logs = c.execute("SELECT first_turn, summary_message_id FROM mnemo.compaction_log WHERE tenant_id = %s"
                     " ORDER BY compaction_id", (tenant,)).fetchall()
    assert len(logs) == 2 and logs[1][0] == 0
    assert row(c, "SELECT is_compacted, compacted_into FROM mnemo.messages WHERE tenant_id = %s AND message_id = %s",
               tenant, logs[0][1]) == {"is_compacted": True, "compacted_into": logs[1][1]}


def test_compaction_looks_only_at_sessions_updated_since_its_last_run(db, tenant):
    """A session's history grows only by new messages, which stamp sessions.updated_at:
    a run sums the history of the sessions updated since the previous completed run
    (less an hour), every active session after a compaction setting changed."""
    c = db.conn
    sweep(c, "compaction", NOW, tenant)  # a completed run for this tenant: the watermark
    stale = db.start_session(tenant, context_window=1500, response_reserve=200)
    fresh = db.start_session(tenant, context_window=1500, response_reserve=200)
    _turns(db, tenant, stale, 0, 14)
    _turns(db, tenant, fresh, 0, 14)
    assert active_tokens(c, tenant, stale) > 3000 and active_tokens(c, tenant, fresh) > 3000
    # as if stale had last been written before that run (not otherwise reachable: a
    # run would have compacted it then)
    c.execute("UPDATE mnemo.sessions SET updated_at = now() - interval '3 hours'"
              " WHERE tenant_id = %s AND session_id = %s", (tenant, stale))
    sweep(c, "compaction", NOW, tenant)
    compacted = {r[0] for r in c.execute(
        "SELECT session_id FROM mnemo.compaction_log WHERE tenant_id = %s", (tenant,))}
    assert compacted == {fresh}
    # a changed compaction setting (here: set to its own value) makes the next run look at all
    factor = c.execute("SELECT value FROM mnemo_internal.settings WHERE key = 'compaction_factor'").fetchone()[0]
    c.execute("SELECT mnemo.set_setting('compaction_factor', %s::jsonb)", (json.dumps(factor),))
    sweep(c, "compaction", NOW, tenant)
    compacted = {r[0] for r in c.execute(
        "SELECT session_id FROM mnemo.compaction_log WHERE tenant_id = %s", (tenant,))}
    assert compacted == {fresh, stale}
    check_compaction_consistent(c, tenant)


def test_sweep_killed_halfway_then_rerun_is_consistent(db, tenant):
    c = db.conn
    sessions = []
    for _ in range(6):
        sid = db.start_session(tenant, context_window=600, response_reserve=100)
        _turns(db, tenant, sid, 0, 4, lines=12)
        sessions.append(sid)
    order = [r[0] for r in c.execute("SELECT session_id FROM mnemo.sessions WHERE tenant_id = %s"
                                     " ORDER BY session_id", (tenant,))]
    # Hold a row lock on the 3rd session's oldest message: the sweep commits sessions
    # 1 and 2 (one per batch), then blocks in the 3rd batch, where it is killed.
    blocker = psycopg.connect(DSN)
    blocker.execute("SELECT 1 FROM mnemo.messages WHERE tenant_id = %s AND session_id = %s AND turn_index = 0"
                    " FOR UPDATE", (tenant, order[2]))
    runner = psycopg.connect(DSN, autocommit=True)
    pid = runner.info.backend_pid
    errors = []

    def run():
        try:
            sweep(runner, "compaction", NOW, tenant, batch=1)
        except psycopg.Error as e:
            errors.append(e)

    th = threading.Thread(target=run)
    th.start()
    try:
        if not waits_for_a_lock(pid, th.is_alive):
            pytest.fail("the sweep never reached the locked session")
        assert c.execute("SELECT pg_terminate_backend(%s::integer)", (pid,)).fetchone()[0]
        th.join(30)
    finally:
        blocker.rollback()
        blocker.close()
        runner.close()
    assert errors  # the sweep's connection died
    done = {r[0] for r in c.execute("SELECT DISTINCT session_id FROM mnemo.compaction_log WHERE tenant_id = %s",
                                    (tenant,))}
    assert done == set(order[:2])  # finished batches kept, the killed one rolled back whole
    check_compaction_consistent(c, tenant)
    assert last_run(c, "compaction")["status"] == "running"  # its backend died mid-run
    sweep(c, "compaction", NOW, tenant, batch=1)
    statuses = [r[0] for r in c.execute("SELECT status FROM mnemo_internal.lifecycle_runs"
                                        " WHERE sweep = 'compaction' ORDER BY run_id DESC LIMIT 2")]
    assert statuses == ["done", "aborted"]
    check_compaction_consistent(c, tenant)
    per_session = dict(c.execute("SELECT session_id, count(*) FROM mnemo.compaction_log WHERE tenant_id = %s"
                                 " GROUP BY 1", (tenant,)).fetchall())
    assert per_session == dict.fromkeys(order, 1)  # each session compacted exactly once
    for sid in sessions:
        assert active_tokens(c, tenant, sid) <= 2 * 600


# ------------------------------------------------------------------------------ partitions
def test_partitions_created_ahead_and_detached_when_compacted(db, tenant, session):
    c = db.conn
    month = datetime(2001, 1, 15, tzinfo=UTC)
    c.execute("SELECT mnemo.create_message_partitions('2001-01-01', 1)")
    # 2001-01 is this test's month: rows an earlier, interrupted run left there go
    c.execute("UPDATE mnemo.messages SET is_pruned = true"
              " WHERE created_at >= '2001-01-01' AND created_at < '2001-02-01'")
    ids = [db.record_message(tenant, session, {"role": "user", "content": f"old message {i}"},
                             created_at=month + timedelta(hours=i)) for i in range(3)]
    # On Citus mnemo.messages has the month level only, its months named messages_pYYYY_MM
    # (Citus's create_time_partitions), and tableoid names a shard of one
    citus = c.execute("SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')").fetchone()[0]
    hash_parts = 1 if citus else c.execute(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'mnemo.messages'::regclass").fetchone()[0]
    sweep(c, "partitions", datetime(2002, 3, 1, tzinfo=UTC))
    # months ahead of the clock exist in every hash partition
    for y, m in (("2002", "03"), ("2002", "04"), ("2002", "05")):
        n = c.execute("SELECT count(*) FROM pg_class WHERE relnamespace = 'mnemo'::regnamespace"
                      " AND relname ~ %s", (f"^messages_p{y}_{m}$" if citus else f"^messages_h[0-9]+_{y}{m}$",)
                      ).fetchone()[0]
        assert n == hash_parts
    # 2001-01 is past the 12-month retention, but holds active rows: kept
    if citus:
        home = "mnemo.messages_p2001_01"
        assert c.execute(f"SELECT count(*) FROM {home} WHERE tenant_id = %s AND message_id = %s",
                         (tenant, ids[0])).fetchone()[0] == 1
    else:
        home = c.execute("SELECT tableoid::regclass::text FROM mnemo.messages"
                         " WHERE tenant_id = %s AND message_id = %s", (tenant, ids[0])).fetchone()[0]
        assert home.endswith("_200101")
    assert c.execute("SELECT to_regclass(%s)", (home,)).fetchone()[0] is not None
    c.execute("UPDATE mnemo.messages SET is_pruned = true WHERE tenant_id = %s AND message_id = ANY(%s)",
              (tenant, ids[:2]))
    sweep(c, "partitions", datetime(2002, 3, 1, tzinfo=UTC))
    assert c.execute("SELECT to_regclass(%s)", (home,)).fetchone()[0] is not None  # one row still active
    c.execute("UPDATE mnemo.messages SET is_compacted = true WHERE tenant_id = %s AND message_id = %s",
              (tenant, ids[2]))
    sweep(c, "partitions", datetime(2002, 3, 1, tzinfo=UTC))
    assert c.execute("SELECT to_regclass(%s)", (home,)).fetchone()[0] is None
    archived = row(c, "SELECT partition_name, range_from::text, range_to::text, row_count"
                      " FROM mnemo_internal.archived_partitions WHERE parent = %s AND range_from = '2001-01-01'"
                      " ORDER BY detached_at DESC, partition_name DESC LIMIT 1",
              "mnemo.messages" if citus else home.rsplit("_", 1)[0])
    assert archived["range_to"] == "2001-02-01" and archived["row_count"] >= 3
    moved = c.execute(f"SELECT count(*) FROM mnemo_archive.{archived['partition_name']}"
                      " WHERE tenant_id = %s", (tenant,)).fetchone()[0]
    assert moved == 3
    assert c.execute("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %s AND message_id = ANY(%s)",
                     (tenant, ids)).fetchone()[0] == 0
    # idempotent: nothing left to do
    sweep(c, "partitions", datetime(2002, 3, 1, tzinfo=UTC))
    assert last_run(c, "partitions")["counts"].get("detached", 0) == 0


# ----------------------------------------------------------------- working memory + crash
def _is_local_cluster() -> bool:
    home, port = os.environ.get("MNEMO_HOME"), os.environ.get("MNEMO_PORT")
    return bool(home and port and DSN == f"postgresql://postgres@127.0.0.1:{port}/mnemo"
                and Path(home, "pgdata", "PG_VERSION").exists())


def _working_memory(conn, tenant) -> list:
    return conn.execute("SELECT session_id, item_key, kind, content FROM mnemo.working_memory"
                        " WHERE tenant_id = %s ORDER BY 1, 2", (tenant,)).fetchall()


def test_working_memory_is_built_from_durable_data(db, tenant, session):
    c = db.conn
    dec = memory(c, tenant, "decision", "Use PostgreSQL for the queue.", session)
    pin = memory(c, tenant, "note", "Pinned note.", session, is_pinned=True)
    memory(c, tenant, "fact", "An ordinary fact stays out of working memory.", session)
    sweep(c, "working_memory", None, tenant)
    assert [r[1] for r in _working_memory(c, tenant)] == sorted([f"memory:{dec}", f"memory:{pin}"])
    c.execute("UPDATE mnemo.sessions SET status = 'closed' WHERE tenant_id = %s", (tenant,))
    sweep(c, "working_memory", None, tenant)
    assert _working_memory(c, tenant) == []


@pytest.mark.skipif(not _is_local_cluster(),
                    reason="restarts the server: only on the local cluster this checkout owns, not DATABASE_URL")
def test_working_memory_rebuilt_after_crash(db, tenant, session):
    c = db.conn
    memory(c, tenant, "decision", "Ship on Fridays only after the canary passes.", session)
    memory(c, tenant, "open_loop", "Waiting for the security review.", session)
    db.record_message(tenant, session, {"role": "user", "content": "durable message"})
    sweep(c, "working_memory", None, tenant)
    built = _working_memory(c, tenant)
    assert len(built) == 2
    c.execute("CHECKPOINT")
    env = dict(os.environ)
    subprocess.run([str(ROOT / "scripts" / "cluster.sh"), "crash-restart"], check=True, env=env,
                   capture_output=True, timeout=120)
    db.conn = psycopg.connect(DSN, autocommit=True)  # the old connection died with the server
    with psycopg.connect(DSN, autocommit=True) as fresh:
        assert fresh.execute("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %s",
                             (tenant,)).fetchone()[0] == 1  # durable data survived
        assert _working_memory(fresh, tenant) == []  # the UNLOGGED table came back empty
        assert fresh.execute("SELECT count(*) FROM mnemo_internal.working_memory_built").fetchone()[0] == 0
        sweep(fresh, "working_memory", None, tenant)
        assert _working_memory(fresh, tenant) == built


# ------------------------------------------------------------------- long session replay
def test_long_session_replay_with_jobs_running(db, tenant):
    """2,000+ turns with tool outputs through record_message while the compaction
    sweep and the job runner run alongside (as pg_cron would run them): active history
    stays bounded, every compaction is logged, compile_context stays within budget."""
    c = db.conn
    window = 4000
    sid = db.start_session(tenant, context_window=window, response_reserve=500)
    stop = threading.Event()
    errors: list[Exception] = []

    def loop(statement: str, args: tuple, pause: float) -> None:  # one pg_cron job, back to back
        try:
            with psycopg.connect(DSN, autocommit=True) as bg:
                while not stop.is_set():
                    bg.execute(statement, args)
                    time.sleep(pause)
        except psycopg.Error as e:  # surfaced in the test below
            errors.append(e)

    threads = [threading.Thread(target=loop, args=a) for a in (
        ("CALL mnemo.run_sweep('compaction', now(), %s)", (tenant,), 0.1),
        ("CALL mnemo.run_jobs(16, 1)", (), 0.5))]
    for th in threads:
        th.start()
    peak = late_peak = 0
    compiles = 0
    started = time.monotonic()
    try:
        for i in range(500):  # 4 messages a cycle: 2,000 turns
            db.record_message(tenant, sid, {"role": "user", "content": f"Run the tests for module {i} please."})
            db.record_message(tenant, sid, {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": "shell", "arguments": json.dumps({"cmd": f"pytest tests/test_mod_{i}.py"})}}]})
            db.record_message(tenant, sid, {"role": "tool", "tool_call_id": f"call_{i}",
                                            "content": _log_output(i, 8 + i % 12)})
            db.record_message(tenant, sid, {"role": "assistant",
                                            "content": f"Module {i} fails with E_TEST_{i}; fixed tests/test_mod_{i}.py."})
            active = active_tokens(c, tenant, sid)
            peak = max(peak, active)
            if i >= 250:
                late_peak = max(late_peak, active)
            if i % 50 == 49:
                b = db.compile_context_bundle(tenant, sid, f"why did module {i - 5} fail?")
                assert b["report"]["tokens"]["total"] <= b["report"]["budget"]["available"]
                assert_tool_pairs_whole(b["messages"])
                compiles += 1
    finally:
        stop.set()
        for th in threads:
            th.join(120)
    assert not errors, errors
    sweep(c, "compaction", None, tenant)
    replay_s = time.monotonic() - started
    turns = c.execute("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %s AND turn_index >= 0",
                      (tenant,)).fetchone()[0]
    assert turns == 2000
    final = active_tokens(c, tenant, sid)
    assert final <= 2 * window
    written = c.execute("SELECT sum(token_count) FROM mnemo.messages WHERE tenant_id = %s AND turn_index >= 0",
                        (tenant,)).fetchone()[0]
    # Bounded: every compaction ends at or below the trigger, and the active history
    # does not grow with the session. The replay writes ~10k tokens/s (far beyond an
    # agent's pace), so between two background passes a few seconds of writes pile up.
    assert c.execute("SELECT max(active_tokens_after) FROM mnemo.compaction_log WHERE tenant_id = %s",
                     (tenant,)).fetchone()[0] <= 2 * window
    # The sampled peak depends on the machine's load (2 shared cores; in the full suite
    # pg_cron's job runner works through the earlier tests' jobs meanwhile: peaks of
    # 34-35 % of all that was written were seen there, under a third alone), so it is only
    # held to half of it (without compaction it would be all of it); the
    # per-compaction bound above is exact.
    assert peak < written / 2, (peak, late_peak, written)
    check_compaction_consistent(c, tenant)
    stats = row(c, "SELECT count(*) AS n, min(ratio) AS min_ratio, sum(tokens_removed)::float8"
                   " / sum(summary_tokens) AS ratio, sum(messages_compacted) AS msgs"
                   " FROM mnemo.compaction_log WHERE tenant_id = %s", tenant)
    compacted = c.execute("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %s AND is_compacted",
                          (tenant,)).fetchone()[0]
    # How many passes it takes depends on the load too: each pass compacts all that piled up
    # since the last one (20 passes alone, 9 in a loaded fresh-clone run), so only repeated
    # compaction during the replay is required; every compacted message is in the log.
    assert stats["n"] >= 3 and stats["msgs"] == compacted
    assert stats["ratio"] >= 5, stats
    print(f"\nreplay: {turns} turns ({written} tokens) in {replay_s:.1f}s, {stats['n']} compactions, rho "
          f"overall {stats['ratio']:.1f} (min {stats['min_ratio']:.1f}), peak active {peak} tokens (second half "
          f"{late_peak}), final {final}, {compiles} compiles within budget")
