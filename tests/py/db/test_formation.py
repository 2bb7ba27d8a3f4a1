"""Memory formation (issue 4) against the real database and embedding model: the
extract job, dedup, supersession with as_of, file re-reads, admission control,
remember / correct / forget / query_decisions, and the helper LLM path against a
local server that speaks the OpenAI chat-completions protocol."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from conftest import DSN, drain_jobs
from fake_llm import HANG_S

from mnemosyne import connect, errors

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def extract(db, tenant, session, **payload):
    payload["session_id"] = str(session)
    return db._call("SELECT mnemo_internal.extract(%(t)s, %(p)s)", {"t": tenant, "p": json.dumps(payload)})


def run_jobs(db, tenant):
    """Run queued jobs until this tenant's are done (worker 12: pg_cron's is 0)."""
    drain_jobs(db, tenant, 12)


@pytest.fixture(autouse=True)
def _drop_leftover_jobs(db, tenant):
    """Jobs a test did not run are dropped, so that later runners skip them."""
    yield
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'", {"t": tenant})


def say(db, tenant, session, role, content, at, **kw):
    return db.record_message(tenant, session, {"role": role, "content": content, **kw}, created_at=at)


def rows(db, sql, **params):
    with db.conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def memories(db, tenant):
    return rows(db, "SELECT memory_id, kind, content_full, superseded_by, valid_to, source_message_ids"
                    " FROM mnemo.memories WHERE tenant_id = %(t)s ORDER BY memory_id", t=tenant)


def snapshot(db, tenant):
    """Everything formation writes, for the 'changes nothing' check."""
    out = {}
    for table in ("memories", "memory_facts", "memory_decisions", "memory_tasks", "memory_versions",
                  "entities", "entity_aliases", "entity_mentions", "entity_edges", "memory_links",
                  "admission_log", "lexicon"):
        out[table] = sorted(map(str, rows(db, f"SELECT * FROM mnemo.{table} WHERE tenant_id = %(t)s",
                                          t=tenant)))
    return out


def context_text(db, tenant, session, query, **options):
    msgs = db.compile_context(tenant, session, query, budget=1500, **options)
    return "\n".join(m["content"] for m in msgs if isinstance(m.get("content"), str))


@pytest.fixture()
def conv(db, tenant):
    s = db.start_session(tenant, context_window=8192)
    ids = [
        say(db, tenant, s, "user", "Hi! I live in Paris and I work at Acme Corp.", T0),
        say(db, tenant, s, "assistant", "Sure, I'll do that.", T0 + timedelta(minutes=1)),
        say(db, tenant, s, "user", "We decided to use PostgreSQL instead of MongoDB because we need "
            "transactions across accounts.", T0 + timedelta(days=1)),
        say(db, tenant, s, "user", "Big news: I moved to Berlin last month. I need to renew my passport "
            "by Friday.", T0 + timedelta(days=30)),
    ]
    return s, ids


def test_extract_paris_then_berlin_supersedes_and_as_of_sees_the_past(db, tenant, conv):
    s, ids = conv
    stats = extract(db, tenant, s)
    assert stats["method"] == "offline" and stats["messages"] == 4
    mems = {m[2]: m for m in memories(db, tenant)}
    paris = next(m for c, m in mems.items() if "Paris" in c)
    berlin = next(m for c, m in mems.items() if "Berlin" in c)
    assert paris[3] == berlin[0] and paris[4] == T0 + timedelta(days=30), "Paris superseded at the move"
    assert berlin[3] is None and berlin[5] == [ids[3]], "derived memories keep their source messages"
    facts = rows(db, "SELECT subject, predicate, object, valid_to FROM mnemo.memory_facts"
                     " WHERE tenant_id = %(t)s AND predicate = 'lives_in' ORDER BY valid_from", t=tenant)
    assert [(f[2], f[3] is not None) for f in facts] == [("Paris", True), ("Berlin", False)]
    versions = rows(db, "SELECT change, reason FROM mnemo.memory_versions WHERE tenant_id = %(t)s"
                        " AND memory_id = %(m)s ORDER BY version", t=tenant, m=paris[0])
    assert [v[0] for v in versions] == ["created", "superseded"]
    assert rows(db, "SELECT 1 FROM mnemo.memory_links WHERE tenant_id = %(t)s AND relation = 'supersedes'"
                    " AND src_memory_id = %(b)s AND dst_memory_id = %(p)s", t=tenant, b=berlin[0], p=paris[0])
    # A fresh session, so the history is not in the way: memories only.
    q = db.start_session(tenant, context_window=8192)
    now_ctx = context_text(db, tenant, q, "Where does the user live?")
    assert "Berlin" in now_ctx and "lives in Paris" not in now_ctx
    as_of = (T0 + timedelta(days=10)).isoformat()
    past = context_text(db, tenant, q, "Where does the user live?", as_of=as_of)
    assert "Paris" in past and "Berlin" not in past
    # the Paris memory is a candidate as of then (sent, or left out for the turn it
    # restates, which the block recalls whole), and not now
    def seen(report: dict) -> bool:
        return f"mem:{paris[0]}" in {i["source"] for i in report["items"]} | {
            o["source"] for o in report["omissions"] if o["reason"] == "repeats_block"}
    ask = {"budget": 1500, "log": False}
    assert seen(db.compile_context_bundle(tenant, q, "Where does the user live?", as_of=as_of, **ask)["report"])
    assert not seen(db.compile_context_bundle(tenant, q, "Where does the user live?", **ask)["report"])
    # entities, mentions and the edge of the current fact
    edges = rows(db, "SELECT s.name, e.relation, d.name, e.valid_to IS NULL FROM mnemo.entity_edges AS e"
                     " JOIN mnemo.entities AS s ON s.tenant_id = e.tenant_id AND s.entity_id = e.src_entity_id"
                     " JOIN mnemo.entities AS d ON d.tenant_id = e.tenant_id AND d.entity_id = e.dst_entity_id"
                     " WHERE e.tenant_id = %(t)s ORDER BY 2, 3", t=tenant)
    assert ("The user", "lives_in", "Berlin", True) in edges
    assert ("The user", "lives_in", "Paris", False) in edges
    assert ("The user", "works_at", "Acme Corp", True) in edges


def test_running_extraction_twice_changes_nothing(db, tenant, conv):
    s, _ = conv
    extract(db, tenant, s)
    before = snapshot(db, tenant)
    again = extract(db, tenant, s, from_turn=0)  # the same messages, forced
    assert again["candidates"] > 0 and again["skipped"] == again["candidates"]
    assert snapshot(db, tenant) == before
    extract(db, tenant, s)  # incremental: nothing new after the watermark
    assert snapshot(db, tenant) == before


def test_extract_job_is_queued_by_record_message_and_run_by_the_runner(db, tenant, conv):
    s, _ = conv
    job = rows(db, "SELECT kind, payload ->> 'session_id' FROM mnemo.jobs WHERE tenant_id = %(t)s"
                   " AND kind = 'extract' AND status = 'queued'", t=tenant)
    assert job == [("extract", str(s))], "one extract job per session, however many messages"
    run_jobs(db, tenant)
    assert rows(db, "SELECT status FROM mnemo.jobs WHERE tenant_id = %(t)s AND kind = 'extract'",
                t=tenant) == [("done",)]
    kinds = {m[1] for m in memories(db, tenant)}
    assert {"fact", "decision", "task"} <= kinds
    assert all(r[0] for r in rows(db, "SELECT embedding IS NOT NULL FROM mnemo.memories"
                                      " WHERE tenant_id = %(t)s", t=tenant))


def test_a_short_statement_about_oneself_forms_a_fact_and_an_agent_step_nothing(db, tenant):
    """Issue 42: "I'm allergic to peanuts" formed no memory (too few words for a note);
    "Let's use find_file to see where it is" formed a decision."""
    s = db.start_session(tenant, context_window=8192)
    now = datetime.now(UTC)
    say(db, tenant, s, "user", "I'm allergic to peanuts.", now)
    say(db, tenant, s, "assistant", "Let's use find_file to see where it is.", now + timedelta(seconds=1))
    run_jobs(db, tenant)
    got = rows(db, "SELECT m.kind, m.content_full, f.subject, f.predicate FROM mnemo.memories AS m"
                   " LEFT JOIN mnemo.memory_facts AS f ON f.tenant_id = m.tenant_id AND f.memory_id = m.memory_id"
                   " WHERE m.tenant_id = %(t)s AND m.is_active", t=tenant)
    assert [(k, subj, pred) for k, _, subj, pred in got] == [("fact", "The user", "health")], got
    assert got[0][1].startswith("The user is allergic to peanuts.")


def test_admission_rejects_routine_output_and_acknowledgements_admits_decisions(db, tenant):
    s = db.start_session(tenant, context_window=8192)
    now = datetime.now(UTC)
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls -la"}'}}
    db.record_message(tenant, s, {"role": "assistant", "content": None, "tool_calls": [call]}, created_at=now)
    db.record_message(tenant, s, {"role": "tool", "tool_call_id": "c1",
                                  "content": "total 12\ndrwxr-xr-x 2 u u 4096 .\n-rw-r--r-- 1 u u 10 a.txt"},
                      created_at=now)
    call2 = {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": '{"command": "git status"}'}}
    db.record_message(tenant, s, {"role": "assistant", "content": None, "tool_calls": [call2]}, created_at=now)
    db.record_message(tenant, s, {"role": "tool", "tool_call_id": "c2",
                                  "content": "On branch main\nnothing to commit, working tree clean"},
                      created_at=now)
    say(db, tenant, s, "assistant", "Sure, I'll do that.", now)
    say(db, tenant, s, "user", "We decided to cache sessions in Redis rather than Memcached because "
        "we need persistence.", now)
    extract(db, tenant, s)
    log = rows(db, "SELECT kind, admitted, decision, score_total, score_type, score_novelty, score_utility,"
                   " score_recency, content_preview FROM mnemo.admission_log WHERE tenant_id = %(t)s", t=tenant)
    by = {(r[0], r[8][:40]): r for r in log}
    ls = next(r for k, r in by.items() if "ls -la" in k[1])
    git = next(r for k, r in by.items() if "git status" in k[1])
    sure = next(r for k, r in by.items() if "Sure" in k[1])
    dec = next(r for k, r in by.items() if k[0] == "decision")
    assert (ls[1], git[1], sure[1]) == (False, False, False)
    assert dec[1] is True and dec[3] > ls[3]
    assert all(0 <= x <= 1 for r in log for x in r[4:8])
    kinds = [m[1] for m in memories(db, tenant)]
    assert kinds == ["decision"], "below-threshold content stays in the history only"
    d = db.query_decisions(tenant, "Redis cache")
    assert d[0]["alternatives"] == ["Memcached"] and "persistence" in d[0]["rationale"][0]


def test_an_environment_answer_to_a_text_action_is_read_as_the_tools_output(db, tenant):
    """Agents that act in text (SWE-agent) get the environment's answer as a user
    message: what it says is tool output, not a request or a fact of the user's."""
    s = db.start_session(tenant, context_window=8192)
    now = datetime.now(UTC)
    say(db, tenant, s, "user", "We need to fix the rounding bug in src/money.py; the total is off by a cent.", now)
    say(db, tenant, s, "assistant", "Let me fix the rounding.\n```\nedit 12:12\n    return round(x, 2)\nend_of_edit\n```",
        now)
    env = say(db, tenant, s, "user", "[File: /repo/src/money.py (40 lines total)]\n12:    return round(x, 2)\n"
              "File updated. Please review the changes and make sure they are correct (correct indentation, "
              "no duplicate lines, etc). Edit the file again if necessary.", now)
    extract(db, tenant, s)
    sources = rows(db, "SELECT kind, content_full FROM mnemo.memories WHERE tenant_id = %(t)s"
                       " AND source_message_ids @> ARRAY[%(m)s]::bigint[]", t=tenant, m=env)
    assert all(kind in ("tool_result", "file_context", "error_context") for kind, _ in sources), sources
    assert not any("asked the assistant" in text or "The user" in text for _, text in sources)
    # the user's own message still gives its task
    assert rows(db, "SELECT 1 FROM mnemo.memories WHERE tenant_id = %(t)s AND content_full LIKE '%%rounding%%'"
                    " AND NOT source_message_ids @> ARRAY[%(m)s]::bigint[]", t=tenant, m=env)


def test_file_reread_supersedes_previous_read_and_unchanged_reread_merges(db, tenant):
    s = db.start_session(tenant, context_window=8192)
    now = datetime.now(UTC)

    def read(i, text):
        call = {"id": f"r{i}", "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'}}
        db.record_message(tenant, s, {"role": "assistant", "content": None, "tool_calls": [call]}, created_at=now)
        db.record_message(tenant, s, {"role": "tool", "tool_call_id": f"r{i}", "content": text},
                          created_at=now + timedelta(seconds=i))

    read(1, "def main():\n    return serve(port=8080)\n")
    extract(db, tenant, s)
    read(2, "def main():\n    return serve(port=9090)\n")
    read(3, "def main():\n    return serve(port=9090)\n")
    extract(db, tenant, s)
    fc = rows(db, "SELECT m.memory_id, m.superseded_by, m.metadata ->> 'max_fidelity',"
                  " coalesce(a.access_count, 0), m.source_key, cardinality(m.source_message_ids)"
                  " FROM mnemo.memories AS m LEFT JOIN mnemo.memory_access AS a USING (tenant_id, memory_id)"
                  " WHERE m.tenant_id = %(t)s AND m.kind = 'file_context' ORDER BY m.memory_id", t=tenant)
    assert len(fc) == 2 and all(r[4] == "file:src/app.py" for r in fc)
    assert fc[0][1] == fc[1][0] and fc[0][2] == "stub", "the re-read supersedes; the old read drops to stub"
    assert fc[1][1] is None and fc[1][3] == 1 and fc[1][5] == 2, "the unchanged re-read merged into it"


def test_exact_and_near_duplicates_merge_with_versions(db, tenant):
    s = db.start_session(tenant, context_window=8192)
    now = datetime.now(UTC)
    say(db, tenant, s, "user", "My favourite editor is Neovim with the Lazy plugin manager.", now)
    say(db, tenant, s, "user", "My favourite editor is Neovim with the Lazy plugin manager.", now)
    say(db, tenant, s, "user", "I have been training for the Berlin marathon with my running club every Sunday.",
        now)
    say(db, tenant, s, "user", "I've been training for the Berlin marathon with my running club every Sunday!",
        now)
    stats = extract(db, tenant, s)
    assert stats["merged"] >= 2, stats
    merged = rows(db, "SELECT a.access_count, cardinality(m.source_message_ids), array_agg(v.change ORDER BY v.version)"
                      " FROM mnemo.memories AS m JOIN mnemo.memory_versions AS v"
                      " ON v.tenant_id = m.tenant_id AND v.memory_id = m.memory_id"
                      " LEFT JOIN mnemo.memory_access AS a ON a.tenant_id = m.tenant_id AND a.memory_id = m.memory_id"
                      " WHERE m.tenant_id = %(t)s GROUP BY m.memory_id, a.access_count, m.source_message_ids"
                      " ORDER BY m.memory_id", t=tenant)
    assert len(merged) == 2
    assert all(r[0] == 1 and r[1] == 2 and r[2] == ["created", "merge"] for r in merged)


def test_remember_is_idempotent_correct_supersedes_forget_erases(db, tenant):
    s = db.start_session(tenant, context_window=8192)
    m1 = db.remember(tenant, "The deploy target is Fly.io in region fra.", kind="fact",
                     options={"fact": {"subject": "deploy", "predicate": "target", "object": "Fly.io"}})
    assert db.remember(tenant, "  the deploy target is fly.io in REGION fra. ", kind="fact") == m1
    run_jobs(db, tenant)
    lex_before = dict(rows(db, "SELECT lexeme, doc_count FROM mnemo.lexicon WHERE tenant_id = %(t)s", t=tenant))
    m2 = db.correct(tenant, m1, "The deploy target is Render in region frankfurt.", reason="moved hosting")
    old = rows(db, "SELECT superseded_by, valid_to IS NOT NULL FROM mnemo.memories WHERE tenant_id = %(t)s"
                   " AND memory_id = %(m)s", t=tenant, m=m1)
    assert old == [(m2, True)]
    ctx = context_text(db, tenant, s, "where do we deploy?")
    assert "Render" in ctx and "Fly.io" not in ctx
    m3 = db.remember(tenant, "We decided to use Render because Fly.io lacked private networking.",
                     kind="decision", options={"rationale": ["private networking"], "alternatives": ["Fly.io"]})
    assert [d["memory_id"] for d in db.query_decisions(tenant, "Render hosting")] == [m3]
    run_jobs(db, tenant)
    # erase the corrected fact and its history: both rows, their versions, links, lexicon share
    assert db.forget(tenant, filter={"contains": "deploy target"}) == 2
    for table, col in (("memories", "memory_id"), ("memory_versions", "memory_id"), ("memory_facts", "memory_id"),
                       ("entity_mentions", "memory_id"), ("admission_log", "memory_id")):
        assert not rows(db, f"SELECT 1 FROM mnemo.{table} WHERE tenant_id = %(t)s AND {col} = ANY(%(m)s)",
                        t=tenant, m=[m1, m2])
    assert not rows(db, "SELECT 1 FROM mnemo.memory_links WHERE tenant_id = %(t)s"
                        " AND (src_memory_id = ANY(%(m)s) OR dst_memory_id = ANY(%(m)s))", t=tenant, m=[m1, m2])
    lex = dict(rows(db, "SELECT lexeme, doc_count FROM mnemo.lexicon WHERE tenant_id = %(t)s", t=tenant))
    assert "render" in lex and "frankfurt" not in lex and "fly.io" in lex  # fly.io: still in the decision
    assert lex[""] == 1 and lex_before[""] == 1
    assert db.forget(tenant, m3) == 1
    assert rows(db, "SELECT count(*) FROM mnemo.memories WHERE tenant_id = %(t)s", t=tenant) == [(0,)]
    assert rows(db, "SELECT count(*) FROM mnemo.entities WHERE tenant_id = %(t)s", t=tenant) == [(0,)]
    assert dict(rows(db, "SELECT lexeme, doc_count FROM mnemo.lexicon WHERE tenant_id = %(t)s", t=tenant)) \
        == {"": 0}


def test_explicit_api_errors(db, tenant):
    with pytest.raises(errors.InvalidParameter):
        db.remember(tenant, "  ")
    with pytest.raises(errors.InvalidParameter):
        db.remember(tenant, "x", kind="gossip")
    with pytest.raises(errors.InvalidParameter):
        db.remember(tenant, "x", options={"fact": {"subject": 1}})
    with pytest.raises(errors.NotFound):
        db.correct(tenant, 987654321987, "y")
    with pytest.raises(errors.InvalidParameter):
        db.forget(tenant)
    with pytest.raises(errors.InvalidParameter):
        db.forget(tenant, filter={"colour": "red"})
    with pytest.raises(errors.NotFound):
        db.forget(tenant, 987654321987)
    assert rows(db, "SELECT count(*) FROM mnemo.memories WHERE tenant_id = %(t)s", t=tenant) == [(0,)]


# ------------------------------------------------------------------ helper LLM
EXTRACTION = {"memories": [
    {"kind": "fact", "content": "Ana lives in Lisbon.", "source": [1], "subject": "Ana",
     "predicate": "lives_in", "object": "Lisbon", "functional": True, "entities": ["Ana", "Lisbon"],
     "utility": 0.9},
    {"kind": "preference", "content": "Ana prefers green tea over coffee.", "source": [2],
     "subject": "Ana", "predicate": "prefers", "object": "green tea", "utility": 0.8},
]}


@pytest.fixture()
def llm(fake_llm):
    """start(mode, timeout, retries): the fake helper LLM (fake_llm.py) answering EXTRACTION."""
    return lambda mode, **kw: fake_llm(mode, EXTRACTION, **kw)


@pytest.fixture()
def ana(db, tenant):
    s = db.start_session(tenant, context_window=8192)
    now = datetime.now(UTC)
    say(db, tenant, s, "user", "I moved to Lisbon in spring.", now, name="Ana")
    say(db, tenant, s, "user", "Green tea please, I'd rather not have coffee.", now, name="Ana")
    return s


def test_helper_llm_extracts_json(db, tenant, ana, llm):
    srv = llm("good")
    stats = extract(db, tenant, ana)
    assert stats["method"] == "helper_llm" and stats["helper_attempts"] == 1
    req = srv.requests[0]
    assert req["auth"] == "Bearer sk-test-key-0123456789abcdefghij"
    assert req["body"]["model"] == "tiny-model" and req["body"]["response_format"] == {"type": "json_object"}
    assert "Ana: I moved to Lisbon" in req["body"]["messages"][1]["content"]
    got = rows(db, "SELECT kind, content_full, provenance ->> 'method', cardinality(source_message_ids)"
                   " FROM mnemo.memories WHERE tenant_id = %(t)s ORDER BY memory_id", t=tenant)
    assert got == [("fact", "Ana lives in Lisbon.", "helper_llm", 1),
                   ("preference", "Ana prefers green tea over coffee.", "helper_llm", 1)]
    assert rows(db, "SELECT object FROM mnemo.memory_facts WHERE tenant_id = %(t)s AND predicate = 'lives_in'",
                t=tenant) == [("Lisbon",)]


def test_helper_llm_malformed_reply_is_retried(db, tenant, ana, llm):
    srv = llm("malformed-then-good")
    stats = extract(db, tenant, ana)
    assert stats["method"] == "helper_llm" and stats["helper_attempts"] == 2 and len(srv.requests) == 2


def test_helper_llm_always_malformed_falls_back_to_offline(db, tenant, ana, llm):
    srv = llm("malformed", retries=2)
    stats = extract(db, tenant, ana)
    assert len(srv.requests) == 3 and stats["method"] == "offline" and "malformed" in stats["fallback"]
    assert rows(db, "SELECT DISTINCT provenance ->> 'method' FROM mnemo.memories WHERE tenant_id = %(t)s",
                t=tenant) == [("offline",)]


def test_helper_llm_that_never_answers_times_out_then_falls_back(db, tenant, ana, llm):
    srv = llm("hang", timeout=0.3, retries=1)
    t = time.perf_counter()
    stats = extract(db, tenant, ana)
    elapsed = time.perf_counter() - t
    assert len(srv.requests) == 2 and stats["method"] == "offline" and "timed out" in stats["fallback"]
    assert elapsed < HANG_S, elapsed  # cut short by the timeout, not waited out
    assert rows(db, "SELECT object FROM mnemo.memory_facts WHERE tenant_id = %(t)s AND predicate = 'lives_in'",
                t=tenant) == [("Lisbon",)]


def test_remember_goes_through_while_an_extraction_waits_for_its_model(db, tenant, ana, llm):
    """The tenant's formation lock covers formation's writes only: an extract job that
    waits on its helper LLM (or the encoder) does not hold up a remember on the same
    tenant. Before, the job took the lock first and remember waited out the model."""
    srv = llm("hang", timeout=20.0, retries=0)
    out = {}

    def extraction():
        with connect(DSN) as other:
            out["stats"] = extract(other, tenant, ana)

    job = threading.Thread(target=extraction)
    job.start()
    deadline = time.monotonic() + 60
    while not srv.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.requests, "the extraction never reached its helper LLM"
    mid = db.remember(tenant, "Ana keeps the spare key under the blue pot.", kind="fact")
    still_waiting = job.is_alive()
    job.join(120)
    assert mid and still_waiting, "remember waited for the extraction's model"
    assert out["stats"]["method"] == "offline" and "timed out" in out["stats"]["fallback"]
    assert rows(db, "SELECT object FROM mnemo.memory_facts WHERE tenant_id = %(t)s AND predicate = 'lives_in'",
                t=tenant) == [("Lisbon",)]


def test_two_extractions_of_one_session_ask_the_model_once(db, tenant, ana, llm):
    """A manual extraction beside the session's job: the second waits for the first
    (the session's extraction lock), then reads its watermark and has nothing to ask."""
    srv = llm("hang", timeout=3.0, retries=0)
    out = []

    def extraction():
        with connect(DSN) as other:
            out.append(extract(other, tenant, ana))

    runs = [threading.Thread(target=extraction) for _ in range(2)]
    for r in runs:
        r.start()
    for r in runs:
        r.join(120)
    assert len(srv.requests) == 1, "both extractions asked the model for the same messages"
    assert sorted(o["messages"] for o in out) == [0, 2]


def test_helper_llm_key_is_owner_only(db):
    with psycopg.connect(DSN, autocommit=True) as c:  # info.dsn has no password
        c.execute("SET ROLE mnemo_app")
        for sql in ("SELECT * FROM mnemo_internal.helper_llm_keys", "SELECT * FROM mnemo_internal.helper_llm",
                    "SELECT mnemo.set_helper_llm('http://evil.example/v1', 'm')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(sql)


def test_each_candidate_is_redacted_once_with_one_lookup(db, tenant, conv):
    """Issue 21 (5): every extracted candidate was redacted twice (before its embedding
    and again in form()), each time asking the database whether redaction is on."""
    session, _ = conv
    with psycopg.connect(DSN) as conn:
        conn.execute("SET track_functions = 'all'")
        out = conn.execute("SELECT mnemo_internal.extract(%s, %s)",
                           (tenant, json.dumps({"session_id": str(session), "from_turn": 0, "to_turn": 3}))
                           ).fetchone()[0]
        calls = dict(conn.execute("SELECT funcname, calls FROM pg_stat_xact_user_functions"
                                  " WHERE schemaname = 'mnemo_internal'").fetchall())
        conn.rollback()
    # one lookup for the batch; insert_memory, the one insert path, checks again for its own
    assert out["candidates"] > 1 and calls["redaction_enabled"] == 1 + calls["insert_memory"]


def _formed(db, tenant):
    """What formation wrote for a tenant, with its ids (memories, messages) replaced by
    their order in the tenant, so two tenants fed the same conversation compare."""
    mems = rows(db, "SELECT memory_id FROM mnemo.memories WHERE tenant_id = %(t)s ORDER BY memory_id", t=tenant)
    msgs = rows(db, "SELECT message_id, turn_index FROM mnemo.messages WHERE tenant_id = %(t)s", t=tenant)
    mem = {m[0]: i for i, m in enumerate(mems)} | {None: None}
    turn = dict(msgs)

    def turns(ids):
        return sorted(turn[i] for i in ids or [])

    out = {"memories": [(mem[r[0]], r[1], r[2], r[3], mem[r[4]], r[5], turns(r[6]), r[7], r[8], r[9])
                        for r in rows(db, "SELECT m.memory_id, m.kind, m.content_full, m.is_active, m.superseded_by,"
                                          " m.valid_to, m.source_message_ids, m.metadata, m.source_key,"
                                          " coalesce(a.access_count, 0) FROM mnemo.memories AS m"
                                          " LEFT JOIN mnemo.memory_access AS a USING (tenant_id, memory_id)"
                                          " WHERE m.tenant_id = %(t)s ORDER BY m.memory_id", t=tenant)]}
    out["links"] = sorted((mem[r[0]], r[1], mem[r[2]]) for r in rows(
        db, "SELECT src_memory_id, relation, dst_memory_id FROM mnemo.memory_links WHERE tenant_id = %(t)s",
        t=tenant))
    out["facts"] = sorted((mem[r[0]], *r[1:]) for r in rows(
        db, "SELECT memory_id, subject, predicate, object, valid_from, valid_to FROM mnemo.memory_facts"
            " WHERE tenant_id = %(t)s", t=tenant))
    out["versions"] = sorted((mem[r[0]], *r[1:]) for r in rows(
        db, "SELECT memory_id, version, change, reason, new_value - 'superseded_by' - 'source_message_ids'"
            " FROM mnemo.memory_versions"
            " WHERE tenant_id = %(t)s", t=tenant))
    out["admission"] = [(mem[r[0]], *r[1:-1], turns(r[-1])) for r in rows(
        db, "SELECT memory_id, admitted, decision, content_preview, score_total, score_novelty,"
            " source_message_ids FROM mnemo.admission_log WHERE tenant_id = %(t)s ORDER BY admission_id", t=tenant)]
    return out


def test_batch_formation_forms_what_per_candidate_formation_forms(db, tenant):
    """The extract job reads the tenant's memories once for its batch of candidates
    (lookups.Batch); the same conversation formed one lookup per candidate (payload
    "lookup": "per_candidate") must give the same memories, merges, supersessions,
    versions and admission decisions, within a batch and across two."""
    other = "t_" + tenant[2:][::-1]
    db.create_tenant(other)
    read = {"role": "assistant", "content": None}

    def feed(t, s, part):
        day = timedelta(days=1)
        if part == 1:
            say(db, t, s, "user", "Hi! I live in Paris and I work at Acme Corp.", T0)
            say(db, t, s, "user", "My favourite editor is Neovim with the Lazy plugin manager.", T0 + day)
            say(db, t, s, "user", "My favourite editor is Neovim with the Lazy plugin manager.", T0 + day)
            say(db, t, s, "user", "I have been training for the Berlin marathon with my running club every "
                "Sunday.", T0 + 2 * day)
            say(db, t, s, "user", "I have been training for the Berlin marathon with my running club every "
                "Sunday morning.", T0 + 2 * day)
            say(db, t, s, "user", "Sure, sounds good.", T0 + 2 * day)
            say(db, t, s, "user", "Big news: I moved to Berlin last month. I need to renew my passport by "
                "Friday.", T0 + 30 * day)
            say(db, t, s, "user", "We decided to use PostgreSQL instead of MongoDB because we need "
                "transactions across accounts.", T0 + 31 * day)
        else:
            for i, text in enumerate(("def main():\n    return serve(port=8080)\n",
                                      "def main():\n    return serve(port=9090)\n",
                                      "def main():\n    return serve(port=9090)\n")):
                call = {"id": f"r{i}", "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'}}
                db.record_message(t, s, {**read, "tool_calls": [call]}, created_at=T0 + 40 * day)
                db.record_message(t, s, {"role": "tool", "tool_call_id": f"r{i}", "content": text},
                                  created_at=T0 + 40 * day + timedelta(seconds=i))
            say(db, t, s, "user", "My favourite editor is Neovim with the Lazy plugin manager.", T0 + 41 * day)
            say(db, t, s, "user", "I live in Madrid.", T0 + 10 * day)  # older than Berlin: late
            say(db, t, s, "user", "I just moved to Lisbon for the new job and I love it here.", T0 + 42 * day)
            say(db, t, s, "user", "Now I live in Porto.", T0 + 43 * day)
            say(db, t, s, "user", "We decided to use PostgreSQL instead of MongoDB because we need "
                "transactions across accounts.", T0 + 44 * day)

    sessions = {t: db.start_session(t, context_window=8192) for t in (tenant, other)}
    stats = {}
    for part in (1, 2):
        for t, lookup in ((tenant, None), (other, "per_candidate")):
            feed(t, sessions[t], part)
            payload = {"lookup": lookup} if lookup else {}
            stats[t, part] = extract(db, t, sessions[t], **payload)
        assert stats[tenant, part] == stats[other, part]
    assert stats[tenant, 1]["candidates"] >= 6 and stats[tenant, 2]["candidates"] >= 6
    assert all(stats[tenant, p]["merged"] and stats[tenant, p]["superseded"] for p in (1, 2)), stats
    batch, single = _formed(db, tenant), _formed(db, other)
    for part in batch:
        assert batch[part] == single[part], part
    # what the conversation exercised: supersession within a batch and across, a late
    # statement stored superseded, a file re-read, exact and near merges
    superseded = {m[2] for m in batch["memories"] if m[4] is not None}
    assert any("Paris" in c for c in superseded) and any("Berlin" in c for c in superseded)
    assert any("Madrid" in c for c in superseded) and any("port=8080" in c for c in superseded)
    assert {a[2] for a in batch["admission"]} >= {"merged_exact", "merged_near", "admitted", "rejected"}
