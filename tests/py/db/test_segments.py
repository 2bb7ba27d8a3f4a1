"""Retrieval segments (mnemo.message_segments, migration 0007): compile_context reads
a tenant's sealed messages from them and the rest live (the tail). Against the real
database: sealing changes no context, nothing committed is ever skipped, a segment
is never trusted over the table, and the sweep seals what waits."""

from __future__ import annotations

import json
import threading

import numpy as np
import psycopg
import pytest
from conftest import DSN
from helpers import run_jobs, say, text_of
from psycopg import sql

TOPICS = ["the invoice numbering scheme", "the staging database password rotation",
          "the quarterly billing export", "the PDF renderer upgrade", "the customer portal login"]


def build(db, tenant: str, min_messages: int = 1) -> int:
    return db.conn.execute("SELECT mnemo_internal.build_message_segments(%s, %s)",
                           (tenant, min_messages)).fetchone()[0]


def segments(db, tenant: str) -> list[tuple]:
    return db.conn.execute("SELECT segment_no, after_message_id, last_message_id, n_messages"
                           " FROM mnemo.message_segments WHERE tenant_id = %s ORDER BY segment_no",
                           (tenant,)).fetchall()


def _conversation(db, tenant: str, sessions: int = 3, turns: int = 12) -> list[str]:
    sids = []
    for s in range(sessions):
        sid = db.start_session(tenant, context_window=128000)
        sids.append(sid)
        for i in range(turns):
            topic = TOPICS[(s + i) % len(TOPICS)]
            said = {"role": "user", "content": f"Session {s} turn {i}: what changed in {topic}?"}
            if i % 3 == 0:
                said["name"] = "ann"
            db.record_message(tenant, sid, said)
            say(db, tenant, sid, "assistant", f"In session {s}, {topic} moved to plan S{s}T{i}.")
    run_jobs(db, tenant)
    return sids


def test_sealing_changes_no_context(db, tenant):
    sids = _conversation(db, tenant)
    queries = [(sids[-1], "What happened to the PDF renderer upgrade?"),
               (sids[0], "ann asked about the invoice numbering scheme"),
               (sids[1], None),
               # the first person: the user's turns (their roles, sealed or live)
               (sids[2], "What did I ask about the customer portal login?")]
    opts = {"budget": 1500, "log": False}
    before = [db.compile_context_bundle(tenant, s, q, **opts) for s, q in queries]
    assert build(db, tenant) == 72  # every message: 3 sessions x 24
    assert segments(db, tenant)[0][3] == 72
    after = [db.compile_context_bundle(tenant, s, q, **opts) for s, q in queries]
    for b, a in zip(before, after, strict=True):
        assert a["messages"] == b["messages"]
        # the same items (their scores' freshness moves with the clock)
        picked = lambda bundle: [{k: v for k, v in i.items() if k != "score"} for i in bundle["report"]["items"]]
        assert picked(a) == picked(b)
    assert any(i["source"].startswith("msg:") for b in after for i in b["report"]["items"])


def test_sealed_vectors_are_int8_codes_that_keep_pgvectors_cosine(db, tenant):
    _conversation(db, tenant, sessions=1, turns=10)
    assert build(db, tenant) == 20
    n, ids, embedded, norms, codes, scales = db.conn.execute(
        "SELECT n_messages, message_ids, embedded, embedding_norm, embeddings, embedding_scale"
        " FROM mnemo.message_segments WHERE tenant_id = %s", (tenant,)).fetchone()
    assert len(codes) == 20 * 384 and len(scales) == 20 * 4  # a byte a dimension
    assert np.frombuffer(embedded, dtype=np.uint8).all()
    query = "What changed in the quarterly billing export?"
    exact = dict(db.conn.execute(
        "SELECT message_id, 1 - (embedding <=> mnemo.embed(%s)) FROM mnemo.messages"
        " WHERE tenant_id = %s", (query, tenant)).fetchall())
    q = np.array(json.loads(db.conn.execute("SELECT mnemo.embed(%s)::text", (query,)).fetchone()[0]),
                 dtype=np.float32)
    vectors = np.frombuffer(codes, dtype=np.int8).reshape(n, 384).astype(np.float32)
    got = (vectors @ q) * np.frombuffer(scales, dtype=">f4") / (
        np.frombuffer(norms, dtype=">f8") * np.linalg.norm(q))
    ids = np.frombuffer(ids, dtype=">i8").tolist()
    assert max(abs(g - exact[i]) for i, g in zip(ids, got, strict=True)) < 0.005
    assert ids[int(np.argmax(got))] == max(exact, key=exact.get)  # the same best match


def test_the_tail_after_a_segment_and_what_changed_since(db, tenant):
    sids = _conversation(db, tenant, sessions=2, turns=6)
    assert build(db, tenant) == 24
    # new after sealing: read live from the tail
    late = say(db, tenant, sids[0], "user", "Late note: the renderer ships as build R-7781.")
    run_jobs(db, tenant)
    bundle = db.compile_context_bundle(tenant, sids[1], "Which build does the renderer ship as?",
                                       budget=3000, log=False)
    assert "R-7781" in text_of(bundle["messages"])
    # pruned after sealing: the segment still lists it, the table says no
    sealed = db.conn.execute("SELECT min(message_id) FROM mnemo.messages WHERE tenant_id = %s"
                             " AND content LIKE %s", (tenant, "%S0T2%")).fetchone()[0]
    db.conn.execute("UPDATE mnemo.messages SET is_pruned = true WHERE tenant_id = %s AND message_id = %s",
                    (tenant, sealed))
    bundle = db.compile_context_bundle(tenant, sids[1], "plan S0T2", budget=3000, log=False)
    assert f"msg:{sealed}" not in [i["source"] for i in bundle["report"]["items"]]
    # the next build grows the last segment with the tail, and drops the pruned one
    assert build(db, tenant) == 0  # a single new message is below even min 1 once net of the pruned
    assert say(db, tenant, sids[1], "user", "one more") and run_jobs(db, tenant) is None
    assert build(db, tenant) >= 1
    seg = segments(db, tenant)
    assert len(seg) == 1 and seg[0][2] > late and seg[0][3] == 24 + 2 - 1


def test_a_message_whose_embedding_is_queued_waits(db, tenant):
    sid = db.start_session(tenant, context_window=128000)
    ids = [say(db, tenant, sid, "user", f"Turn {i} about {TOPICS[i % 5]}.") for i in range(6)]
    # nothing embedded yet: nothing sealed (its vector belongs in the segment)
    assert build(db, tenant) == 0 and segments(db, tenant) == []
    run_jobs(db, tenant)
    assert build(db, tenant) == 6 and segments(db, tenant)[0][2] == ids[-1]


def test_an_uncommitted_write_holds_the_seal_back(db, tenant):
    sid = db.start_session(tenant, context_window=128000)
    say(db, tenant, sid, "user", "Committed before the build.")
    run_jobs(db, tenant)
    writer = psycopg.connect(DSN)  # a transaction still open after record_message
    try:
        writer.execute("SELECT mnemo.record_message(%s, %s, %s::jsonb)",
                       (tenant, sid, '{"role": "user", "content": "not committed yet"}'))
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("n", build(db, tenant)))
        t.start()
        t.join(10)
        # it waited for the writer (lock_timeout 2 s), then gave up without sealing
        assert result.get("n") == 0 and segments(db, tenant) == []
    finally:
        writer.rollback()
        writer.close()
    assert build(db, tenant) == 1


def test_the_sweep_seals_waiting_tenants_and_bad_input_is_refused(db, tenant):
    _conversation(db, tenant, sessions=1, turns=40)  # 80 messages: past the default 64
    db.run_sweep("segments", tenant_id=tenant)
    assert segments(db, tenant)[0][3] == 80
    run = db.conn.execute("SELECT status, counts FROM mnemo_internal.lifecycle_runs"
                          " WHERE sweep = 'segments' ORDER BY run_id DESC LIMIT 1").fetchone()
    assert run[0] == "done" and run[1]["messages_sealed"] == 80
    with pytest.raises(psycopg.Error) as e:
        db.conn.execute("SELECT mnemo_internal.build_message_segments(%s, 0)", (tenant,))
    assert e.value.sqlstate == "MN001"


def test_the_sweep_asks_only_tenants_with_newer_messages(db, tenant):
    """A tenant with fewer newer messages than a segment waits for (64) costs the sweep
    a probe, not a call of build_message_segments (counted with track_functions in one
    transaction)."""
    def calls_in_one_sweep_batch() -> tuple[int, int]:
        with psycopg.connect(DSN) as c:  # (one transaction: its own function statistics)
            c.execute("SET LOCAL track_functions = 'pl'")
            sealed = c.execute("SELECT mnemo_internal.sweep_segments(now(), %s, 10, '{}')",
                               (tenant,)).fetchone()[0]["counts"]["messages_sealed"]
            calls = c.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
                              " WHERE funcname = 'build_message_segments'").fetchone()[0]
        return calls, sealed

    _conversation(db, tenant, sessions=1, turns=40)  # 80 messages
    assert calls_in_one_sweep_batch() == (1, 80)
    assert calls_in_one_sweep_batch() == (0, 0)  # all sealed: not asked
    _conversation(db, tenant, sessions=1, turns=3)  # 6 newer, under the minimum of 64: not asked
    assert calls_in_one_sweep_batch() == (0, 0)
    _conversation(db, tenant, sessions=1, turns=29)  # 64 newer
    assert calls_in_one_sweep_batch() == (1, 64)


def test_one_tenant_never_reads_anothers_segments(db, tenant):
    other = "t_seg_" + tenant[-8:]
    db.create_tenant(other)
    try:
        _conversation(db, other, sessions=1, turns=4)
        assert build(db, other) == 8
        sid = db.start_session(tenant, context_window=128000)
        bundle = db.compile_context_bundle(tenant, sid, "What changed in the invoice numbering scheme?",
                                           budget=3000, log=False)
        assert "plan S0T" not in text_of(bundle["messages"])
        # An application's role (a member of mnemo_app that logs in: on Citus the
        # workers are reached as it) reading the table directly sees its tenant's
        # segments alone: none for this tenant, the other's for the other.
        role = "r_seg_" + tenant[-8:]
        db.conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE mnemo_app")
        try:
            with psycopg.connect(DSN.replace("postgres@", f"{role}@")) as app:
                for reader, seen in ((tenant, 0), (other, 1)):
                    with app.transaction():
                        app.execute(sql.SQL("SET LOCAL mnemo.tenant_id = {}").format(sql.Literal(reader)))
                        n = app.execute("SELECT count(*) FROM mnemo.message_segments").fetchone()[0]
                        assert min(n, 1) == seen, (reader, n)
        finally:
            db.conn.execute(f"DROP ROLE {role}")
    finally:
        db.conn.execute("DELETE FROM mnemo.message_segments WHERE tenant_id = %s", (other,))


def test_segment_hits_finds_each_query_lexeme_in_a_sealed_segment(db, tenant):
    """segment_hits looks each query lexeme up by binary search in the segment's
    sorted lexemes: every lexeme the segment holds is found, with its postings in
    query order, whether it sorts first, last or between; one sorting before the
    first, after the last or between two, a NULL and a repeat behave as a plain scan
    of the lexemes would have them (absent, absent, absent, skipped, twice)."""
    _conversation(db, tenant, sessions=2, turns=6)
    build(db, tenant)
    lexemes, offsets, postings = db.conn.execute(
        "SELECT lexemes, posting_offsets, postings FROM mnemo.message_segments WHERE tenant_id = %s",
        (tenant,)).fetchone()
    assert lexemes == sorted(lexemes) and len(lexemes) > 10

    def expected(query):
        terms, rows = [], []
        for k, q in enumerate(query):
            if q in lexemes:
                i = lexemes.index(q)
                found = postings[offsets[i]:offsets[i + 1]]
                rows += found
                terms += [k] * len(found)
        return (terms or None, rows or None)

    middle = lexemes[len(lexemes) // 2]
    queries = [
        [lexemes[0], lexemes[-1], middle, lexemes[1]],
        ["", lexemes[0] + "0", middle + "zz", "~~~" + lexemes[-1], "zzzzzz"],
        [None, middle, middle, lexemes[-1]],
        [],
        list(reversed(lexemes)),
    ]
    for query in queries:
        got = db.conn.execute("SELECT hit_terms, hit_rows FROM mnemo_internal.segment_hits(%s, %s, %s, %s::text[])",
                              (lexemes, offsets, postings, query)).fetchone()
        assert got == expected(query), query
