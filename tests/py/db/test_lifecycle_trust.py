"""Lifecycle sweeps against what tenants write (issue 20, defects 3 and 4).

Promotion fed by the compiles alone (no hand-written statistics), and the sweeps
that read rows a tenant-bound role may write itself (context_log, memories,
memory_access, messages, jobs): no such row fails a sweep for every tenant.
"""

from __future__ import annotations

import json
import sys
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from conftest import DSN
from helpers import run_jobs, waits_for_a_lock
from test_lifecycle import last_run, memory, sweep
from test_segments import _conversation

pytestmark = pytest.mark.usefixtures("drop_leftover_jobs")


def _access(c, tenant: str, memory_id: int) -> tuple:
    return c.execute("SELECT access_count, relevance_accumulator FROM mnemo.memory_access"
                     " WHERE tenant_id = %s AND memory_id = %s", (tenant, memory_id)).fetchone()


def test_compiles_alone_promote_a_memory(db, tenant, session):
    """remember -> compile_context x3 -> access sweep -> promotion sweep: the tier
    changes, from the compiles' scores alone (before migration 0014 the accumulator
    was written by nothing, U(m) stayed 0 and no memory was ever promoted)."""
    c = db.conn
    hot = db.remember(tenant, "The staging database runs on port 6543.", kind="fact", session_id=session)
    db.record_message(tenant, session, {"role": "user", "content": "Which port does staging use?"})
    run_jobs(db, tenant)
    assert c.execute("SELECT tier FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s",
                     (tenant, hot)).fetchone()[0] == "session"
    scores = []
    for q in ("which port does the staging database use?", "staging database port", "port 6543",
              "staging port"):
        bundle = db.compile_context_bundle(tenant, session, q)
        item = next(i for i in bundle["report"]["items"] if i["source"] == f"mem:{hot}")
        scores.append(item["score"])
    sweep(c, "promotion", tenant=tenant)  # nothing was folded yet: no accesses, no promotion
    assert last_run(c, "promotion")["status"] == "done"
    assert c.execute("SELECT tier FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s",
                     (tenant, hot)).fetchone()[0] == "session"

    sweep(c, "access", tenant=tenant)
    count, relevance = _access(c, tenant, hot)
    assert count == 4 and 0 < relevance <= count
    assert relevance == pytest.approx(sum(scores), abs=1e-5)
    sweep(c, "promotion", tenant=tenant)
    assert last_run(c, "promotion")["counts"]["promoted"] == 1
    tier, scope, validated = c.execute("SELECT tier, scope, is_validated FROM mnemo.memories"
                                       " WHERE tenant_id = %s AND memory_id = %s", (tenant, hot)).fetchone()
    assert (tier, scope, validated) == ("episodic", "global", True)
    reason = c.execute("SELECT reason FROM mnemo.memory_versions WHERE tenant_id = %s AND memory_id = %s"
                       " AND change = 'promote'", (tenant, hot)).fetchone()[0]
    assert reason.startswith("utility ") and reason.endswith("above the session threshold")


def test_memories_keep_no_relevance_column_of_their_own(db):
    cols = {r[0] for r in db.conn.execute(
        "SELECT attname FROM pg_attribute WHERE attnum > 0 AND NOT attisdropped"
        " AND attrelid = ANY(ARRAY['mnemo.memories'::regclass, 'mnemo.memory_access'::regclass])"
        " AND attname = 'relevance_accumulator'").fetchall()}
    assert cols == {"relevance_accumulator"}
    assert db.conn.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = 'mnemo.memories'::regclass"
                           " AND attname = 'relevance_accumulator' AND NOT attisdropped").fetchone()[0] == 0
    # no leaf of memories kept it either
    assert db.conn.execute(
        "SELECT count(*) FROM pg_partition_tree('mnemo.memories') AS t JOIN pg_attribute AS a"
        " ON a.attrelid = t.relid AND a.attname = 'relevance_accumulator' AND NOT a.attisdropped").fetchone()[0] == 0


@pytest.fixture()
def two_tenants(db):
    """Two tenants whose ids sort next to each other, after a prefix no one else has
    (a batch of a sweep over every tenant can start right before them)."""
    prefix = "t_" + uuid.uuid4().hex[:12]
    for t in (prefix + "_a", prefix + "_b"):
        db.create_tenant(t)
    return prefix, prefix + "_a", prefix + "_b"


def _a_memory_each(db, a: str, b: str) -> tuple:
    """A session and a fact in each of two tenants, embedded: (sa, sb, ma, mb)."""
    sa, sb = db.start_session(a), db.start_session(b)
    ma = db.remember(a, "A's invoices are issued on the 1st.", kind="fact", session_id=sa)
    mb = db.remember(b, "B deploys on Tuesdays.", kind="fact", session_id=sb)
    run_jobs(db, a, b)
    return sa, sb, ma, mb


def _bound_role(db, tenant: str) -> str:
    role = "r_" + uuid.uuid4().hex[:12]
    db.conn.execute(f"CREATE ROLE {role} NOLOGIN IN ROLE mnemo_app")
    db.conn.execute("SELECT mnemo.bind_role(%s, %s)", (role, tenant))
    return role


def _drop_role(db, role: str) -> None:
    db.conn.execute("DELETE FROM mnemo_internal.role_tenants WHERE role_name = %s", (role,))
    db.conn.execute(f"DROP ROLE {role}")


def _as_role_or_owner(role: str, sql: str, rows: list[tuple]) -> None:
    """Runs sql for each row as the bound role, where it may write the table; else as
    the owner: the sweeps must survive any row the table's constraints allow,
    whoever may write it."""
    with psycopg.connect(DSN, autocommit=True) as c:
        c.execute(f"SET ROLE {role}")
        try:
            for r in rows:
                c.execute(sql, r)
            return
        except psycopg.errors.InsufficientPrivilege:
            pass
    with psycopg.connect(DSN, autocommit=True) as c:
        for r in rows:
            c.execute(sql, r)


def test_access_sweep_survives_any_context_log_row_of_a_bound_role(db, two_tenants):
    """A role bound to A writes context_log rows the sweep cannot read (defect 3: a
    source 'mem:abc' failed every run of the sweep, for every tenant): they are
    skipped, what is readable in them is counted, and B's compiles are folded."""
    c = db.conn
    _, a, b = two_tenants
    sa, sb, ma, mb = _a_memory_each(db, a, b)
    for _ in range(2):
        db.compile_context_bundle(b, sb, "when does B deploy?")
    role = _bound_role(db, a)
    good = f'{{"source": "mem:{ma}", "score": 0.5}}'

    def scored(score: str) -> str:
        return f'[{{"source": "mem:{ma}", "score": {score}}}]'

    bad_items = [
        '[{"source": "mem:abc"}]', '[{"source": "mem:99999999999999999999999"}]',
        '[{"source": "mem:9223372036854775808"}]', '[{"source": "mem:-1"}]', '[{"source": "mem:"}]',
        '[{"source": "mem:1.5"}]', '[{"source": " mem:1"}]', '[{"source": 12}]', '[{"source": null}]',
        good, f'"mem:{ma}"', "5", "null", "[]", '[1, "x", null, [], {"score": 1}]',
        # counted; the score, when not a number in [0, 1], as 0 or clamped
        scored('"high"'), scored("1e400"), scored("-5"), scored("1e-400"), scored("true"), f"[{good}, {good}]",
    ]
    try:
        _as_role_or_owner(role, "INSERT INTO mnemo.context_log (tenant_id, session_id, budget, tokens_used, items)"
                          " VALUES (%s, %s, 1, 1, %s::jsonb)", [(a, sa, i) for i in bad_items])
        _as_role_or_owner(role, "INSERT INTO mnemo.context_log (tenant_id, session_id, budget, tokens_used, items,"
                          " created_at) VALUES (%s, %s, 1, 1, %s::jsonb, %s::timestamptz)",
                          [(a, sa, f"[{good}]", "infinity"), (a, sa, f"[{good}]", "4713-01-01 BC")])
        sweep(c, "access")  # every tenant's rows, as pg_cron runs it
        run = last_run(c, "access")
        assert run["status"] == "done" and run["error"] is None
        assert c.execute("SELECT count(*) FROM mnemo.context_log WHERE tenant_id = ANY(%s) AND NOT accounted",
                         ([a, b],)).fetchone()[0] == 0
        assert _access(c, b, mb)[0] == 2
        # A: "high", 1e400 (1), -5 (0), 1e-400 (0), true (0), two in one row, two odd created_at
        count, relevance = _access(c, a, ma)
        assert count == 9 and relevance == pytest.approx(1 + 0.5 * 4)
        last = c.execute("SELECT last_accessed_at FROM mnemo.memory_access WHERE tenant_id = %s"
                         " AND memory_id = %s", (a, ma)).fetchone()[0]
        assert last <= datetime.now(UTC)
    finally:
        c.execute("DELETE FROM mnemo.context_log WHERE tenant_id = %s AND NOT accounted", (a,))
        _drop_role(db, role)


def test_promotion_and_expiry_survive_timestamps_out_of_pythons_range(db, two_tenants):
    """A tenant may store 'infinity' or '4713-01-01 BC' in created_at and
    last_accessed_at: a batch over every tenant still decides the others'."""
    c = db.conn
    prefix, a, b = two_tenants
    for when in ("infinity", "-infinity", "4713-01-01 BC", "294276-12-31"):
        memory(c, a, "fact", f"Created at {when}.", access_count=10, relevance_accumulator=10,
               created_at=when, last_accessed_at=when, tier="episodic", scope="global")
    hot = memory(c, b, "fact", "B's hot fact.", access_count=3, relevance_accumulator=3,
                 created_at=datetime.now(UTC))
    # one batch from just before A: A's rows first, then B's, in one transaction
    # rolled back afterwards (the batch function, as run_sweep calls it)
    with psycopg.connect(DSN) as s:
        out = s.execute("SELECT mnemo_internal.sweep_py('promotion', now(), NULL, 1000, %s)",
                        (json.dumps({"t": prefix, "m": 0}),)).fetchone()[0]
        assert out["counts"]["promoted"] >= 1
        assert s.execute("SELECT tier FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s",
                         (b, hot)).fetchone()[0] == "episodic"
        state = {"phase": "demotion", "t": prefix, "m": 0}
        s.execute("SELECT mnemo_internal.sweep_py('expiry', now(), NULL, 1000, %s)", (json.dumps(state),))
        s.rollback()
    sweep(c, "promotion", tenant=a)
    sweep(c, "expiry", tenant=a)
    assert last_run(c, "expiry")["status"] == "done"


def test_compaction_survives_malformed_metadata_and_tool_calls(db, tenant):
    """messages.metadata and tool_calls are the tenant's to write: a compaction reads
    them (an earlier summary's first turn, the calls of a transcript)."""
    c = db.conn
    sid = db.start_session(tenant, context_window=1500, response_reserve=200)
    for i in range(14):
        db.record_message(tenant, sid, {"role": "user", "content": f"Turn {i}: the export job failed again "
                                        "with a timeout in the billing module; " * 20})
    # CASE WHEN x = n, not CASE x WHEN n: Citus deparses the latter wrongly for its
    # workers ("operator does not exist: integer = boolean")
    c.execute("UPDATE mnemo.messages SET metadata = CASE WHEN turn_index %% 3 = 0 THEN '[1]'::jsonb"
              " WHEN turn_index %% 3 = 1 THEN '{\"compaction\": [2]}'"
              " ELSE '{\"compaction\": {\"first_turn\": \"x\"}}' END,"
              " tool_calls = CASE WHEN turn_index %% 4 = 0 THEN '{\"a\": 1}'::jsonb"
              " WHEN turn_index %% 4 = 1 THEN '[1, \"x\"]'"
              " WHEN turn_index %% 4 = 2 THEN '[{\"function\": \"f\"}]' ELSE '[{\"function\": {\"name\": \"n\"}}]' END"
              " WHERE tenant_id = %s AND session_id = %s", (tenant, sid))
    sweep(c, "compaction", tenant=tenant)
    run = last_run(c, "compaction")
    assert run["status"] == "done" and run["counts"]["sessions_compacted"] == 1
    assert "sessions_failed" not in run["counts"]
    first = c.execute("SELECT first_turn FROM mnemo.compaction_log WHERE tenant_id = %s", (tenant,)).fetchone()[0]
    assert first == 0


def test_segments_sweep_skips_a_tenant_it_cannot_seal(db, two_tenants):
    """A tenant whose messages or jobs cannot be sealed (here a level's token count
    that is not a number, and a queued embed job whose message id is not one) is
    skipped and counted; the batch goes on to the next tenant."""
    c = db.conn
    prefix, a, b = two_tenants
    _conversation(db, a)
    _conversation(db, b)
    sid = c.execute("SELECT session_id FROM mnemo.sessions WHERE tenant_id = %s LIMIT 1", (a,)).fetchone()[0]
    role = _bound_role(db, a)
    try:
        _as_role_or_owner(role, "INSERT INTO mnemo.jobs (tenant_id, kind, dedup_key, payload)"
                          " VALUES (%s, 'embed', 'forged', %s::jsonb)",
                          [(a, json.dumps({"target": "message", "message_id": "abc"}))])
        _as_role_or_owner(role, "UPDATE mnemo.messages SET levels = '{\"stub\": {\"tokens\": \"many\"}}'"
                          " WHERE tenant_id = %s AND session_id = %s", [(a, sid)])
        out = c.execute("SELECT mnemo_internal.sweep_segments(now(), NULL, 2, %s)",
                        (json.dumps({"after": prefix}),)).fetchone()[0]
        assert out["counts"] == {"messages_sealed": 72, "tenants_sealed": 1, "tenants_failed": 1}
        assert c.execute("SELECT count(*) FROM mnemo.message_segments WHERE tenant_id = %s", (a,)).fetchone()[0] == 0
        assert c.execute("SELECT sum(n_messages) FROM mnemo.message_segments WHERE tenant_id = %s",
                         (b,)).fetchone()[0] == 72
    finally:
        c.execute("DELETE FROM mnemo.jobs WHERE tenant_id = %s", (a,))
        _drop_role(db, role)


def _behind_a_forget(db, tenant: str, memory_id: int, statement: str, args: tuple) -> BaseException | None:
    """Runs `statement` on its own connection while another transaction has forgotten
    `memory_id` and not yet committed; commits the forget once the statement waits
    for it, and returns what the statement raised (None: it went through)."""
    outcome: list[BaseException | None] = []
    with psycopg.connect(DSN) as forgetting, psycopg.connect(DSN, autocommit=True) as runner:
        forgetting.execute("SELECT mnemo.forget(%s, %s)", (tenant, memory_id))
        pid = runner.info.backend_pid

        def run() -> None:
            try:
                runner.execute(statement, args)
                outcome.append(None)
            except psycopg.Error as e:
                outcome.append(e)

        thread = threading.Thread(target=run)
        thread.start()
        waited = waits_for_a_lock(pid, thread.is_alive)
        forgetting.commit()
        thread.join(120)
    assert waited, "the statement never waited for the forget: the race was not set up"
    assert not thread.is_alive()
    return outcome[0]


def test_access_sweep_skips_a_memory_forgotten_while_it_waited(db, two_tenants):
    """forget() commits while the access sweep waits for it (issue 46): the batch
    folds every other tenant's rows and skips the forgotten memory. Before, the
    sweep's existence check read its snapshot, the foreign key saw the delete, and
    the batch failed for every tenant with 23503."""
    c = db.conn
    _, a, b = two_tenants
    sa, sb, gone, kept = _a_memory_each(db, a, b)
    for t, s, m, q in ((a, sa, gone, "when are A's invoices issued?"), (b, sb, kept, "when does B deploy?")):
        sources = [i["source"] for i in db.compile_context_bundle(t, s, q)["report"]["items"]]
        assert f"mem:{m}" in sources
    sweep(c, "access", tenant="no such tenant")  # waits for a run in flight elsewhere
    error = _behind_a_forget(db, a, gone, "CALL mnemo.run_sweep('access')", ())
    assert error is None, error
    run = last_run(c, "access")
    assert run["status"] == "done" and run["error"] is None
    assert _access(c, b, kept)[0] == 1
    assert _access(c, a, gone) is None
    assert c.execute("SELECT count(*) FROM mnemo.context_log WHERE tenant_id = ANY(%s) AND NOT accounted",
                     ([a, b],)).fetchone()[0] == 0


def test_recall_index_sync_skips_a_memory_forgotten_while_it_waited(db, tenant, session):
    """The same race in the segments sweep's recall-index sync, which reads memories
    and writes recall_index rows that reference them."""
    gone = db.remember(tenant, "The staging database runs on port 6543.", kind="fact", session_id=session)
    kept = db.remember(tenant, "Deploys happen on Tuesdays.", kind="fact", session_id=session)
    run_jobs(db, tenant)
    error = _behind_a_forget(db, tenant, gone, "SELECT mnemo_internal.sync_recall_index(%s, 0)", (tenant,))
    assert error is None, error
    items = {r[0] for r in db.conn.execute("SELECT memory_id FROM mnemo_internal.recall_index"
                                           " WHERE tenant_id = %s AND is_memory", (tenant,))}
    assert items == {kept}


def test_bench_trust_sees_a_sweep_that_failed_beside_it(db):
    """bench-trust fails a part when a sweep failed during it (issue 46: the access
    sweep failed six minutes in a row and the suite said passed): a failed run in the
    window is listed; one cut off by a crash is not, in the crash part alone."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from trust import background

    since = background.server_now(DSN)
    name = "t_sweep_" + uuid.uuid4().hex[:8]
    c = db.conn
    try:
        for sqlstate, error in (("23503", "violates foreign key constraint"), ("57P01", "terminating connection")):
            c.execute("INSERT INTO mnemo_internal.lifecycle_runs (sweep, clock, status, error, sqlstate)"
                      " VALUES (%s, now(), 'failed', %s, %s)", (name, error, sqlstate))
        mine = [f for f in background.failed_runs(DSN, since) if f["job"] == name]
        assert sorted(f["sqlstate"] for f in mine) == ["23503", "57P01"]
        mine = [f for f in background.failed_runs(DSN, since, crashes=True) if f["job"] == name]
        assert [f["sqlstate"] for f in mine] == ["23503"]
        assert not [f for f in background.failed_runs(DSN, datetime.now(UTC) + timedelta(hours=1))
                    if f["job"] == name]
    finally:
        c.execute("DELETE FROM mnemo_internal.lifecycle_runs WHERE sweep = %s", (name,))
