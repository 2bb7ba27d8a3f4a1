"""The digests sweep against the real database (issue 42): facts said in different
sessions about one topic or entity gathered into one dated memory, kept in step with
its members, within one tenant and its readers' sensitivity.

Memories are placed through mnemo_internal.insert_memory (the one insert path), on
turns recorded in sessions at their dates, then `CALL mnemo.run_sweep('digests', ...)`
runs as pg_cron would, scoped to the test's tenant.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from conftest import DSN
from helpers import run_jobs, say
from test_lifecycle import row, sweep

pytestmark = pytest.mark.usefixtures("drop_leftover_jobs")

MARCH = datetime(2023, 3, 3, 10, 0, tzinfo=UTC)
APRIL = datetime(2023, 4, 10, 10, 0, tzinfo=UTC)
MAY = datetime(2023, 5, 20, 10, 0, tzinfo=UTC)


@pytest.fixture()
def conn():
    with psycopg.connect(DSN, autocommit=True) as c:
        yield c


def note(conn, db, tenant: str, when: datetime, text: str, sensitivity: str = "none", scope: str = "global",
         session=None) -> tuple[int, int, object]:
    """A user's turn in a session of its own at `when` (or in `session`), and the
    memory extracted from it: (memory_id, message_id, session)."""
    sid = session or db.start_session(tenant, started_at=when)
    mid = say(db, tenant, sid, "user", text, created_at=when)
    mem = conn.execute(
        "SELECT mnemo_internal.insert_memory(%s, %s, 'fact', %s, 'user_stated', '{}', %s, %s, '{}', %s)",
        (tenant, sid, text, [mid], sensitivity,
         json.dumps({"scope": scope, "created_at": when.isoformat(), "valid_from": when.isoformat()}))).fetchone()[0]
    return mem, mid, sid


def digests_of(conn, tenant: str, active_only: bool = True) -> list[dict]:
    cur = conn.execute(
        "SELECT memory_id, source_key, kind, content_full, sensitivity, scope, tier, session_id,"
        " source_message_ids, is_active, tags FROM mnemo.memories WHERE tenant_id = %s"
        " AND source_key LIKE 'digest:%%' AND (is_active OR NOT %s) ORDER BY memory_id", (tenant, active_only))
    cols = [d.name for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def doctor_digest(conn, tenant: str) -> dict | None:
    return next((d for d in digests_of(conn, tenant) if d["source_key"] == "digest:topic:doctor"), None)


def versions(conn, tenant: str, memory_id: int) -> list[str]:
    return [r[0] for r in conn.execute("SELECT change FROM mnemo.memory_versions WHERE tenant_id = %s"
                                       " AND memory_id = %s ORDER BY version", (tenant, memory_id))]


def two_visits(conn, db, tenant: str) -> tuple[list[int], list[int]]:
    m1, t1, _ = note(conn, db, tenant, MARCH, "The user saw the doctor for a check-up about back pain.")
    m2, t2, _ = note(conn, db, tenant, APRIL, "The user went to a new doctor, a dermatologist, about a rash.")
    note(conn, db, tenant, APRIL, "The user is planning a trip to Lisbon in the summer.")
    return [m1, m2], [t1, t2]


def lexicon_docs(conn, tenant: str) -> int:
    return conn.execute("SELECT coalesce(sum(doc_count), 0) FROM mnemo.lexicon WHERE tenant_id = %s AND lexeme = ''",
                        (tenant,)).fetchone()[0]


def test_forms_a_dated_digest_across_two_sessions_and_the_compile_sends_it(conn, db, tenant):
    _, turns = two_visits(conn, db, tenant)
    run_jobs(db, tenant)
    docs = lexicon_docs(conn, tenant)
    sweep(conn, "digests", tenant=tenant)
    d = doctor_digest(conn, tenant)
    assert d is not None, digests_of(conn, tenant)
    text = d["content_full"]
    assert "(2023-03-03) The user saw the doctor for a check-up about back pain." in text
    assert "(2023-04-10) The user went to a new doctor, a dermatologist, about a rash." in text
    assert text.index("2023-03-03") < text.index("2023-04-10")  # oldest first
    assert "Lisbon" not in text
    assert sorted(d["source_message_ids"]) == sorted(turns)
    assert (d["scope"], d["tier"], d["session_id"], d["sensitivity"], d["kind"]) == (
        "global", "episodic", None, "none", "summary")
    # dated as its newest member
    assert conn.execute("SELECT created_at FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s",
                        (tenant, d["memory_id"])).fetchone()[0] == APRIL
    assert versions(conn, tenant, d["memory_id"]) == ["created"]
    # embedded like any memory, by the embed job; then a new session's compile sends it
    assert conn.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %s AND kind = 'embed'"
                        " AND dedup_key = %s", (tenant, f"memory:{d['memory_id']}")).fetchone()[0] == 1
    run_jobs(db, tenant)
    assert conn.execute("SELECT embedding IS NOT NULL FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s",
                        (tenant, d["memory_id"])).fetchone()[0]
    # it restates its members: not counted again into the tenant's BM25 statistics
    assert lexicon_docs(conn, tenant) == docs
    sid = db.start_session(tenant, started_at=MAY)
    report = db.compile_context_bundle(tenant, sid, "How many doctors did I see?", budget=2000, log=False)["report"]
    # sent, or left out only because every turn it lists is sent whole (a tenant this
    # small fits them all)
    src = f"mem:{d['memory_id']}"
    sent = src in {i["source"] for i in report["items"]}
    repeats = {"source": src, "reason": "repeats_block"} in report["omissions"]
    assert sent or (repeats and {f"msg:{t}" for t in turns} <= {i["source"] for i in report["items"]}), report


def test_a_second_run_changes_nothing(conn, db, tenant):
    two_visits(conn, db, tenant)
    sweep(conn, "digests", tenant=tenant)
    before = digests_of(conn, tenant)
    sweep(conn, "digests", tenant=tenant)
    after = digests_of(conn, tenant)
    assert before == after and before
    assert all(versions(conn, tenant, d["memory_id"]) == ["created"] for d in after)
    run = row(conn, "SELECT counts FROM mnemo_internal.lifecycle_runs WHERE sweep = 'digests'"
                    " ORDER BY run_id DESC LIMIT 1")
    assert run["counts"].get("digests_formed", 0) == 0 and run["counts"].get("digests_updated", 0) == 0


def test_updates_in_place_when_a_member_is_added_or_superseded(conn, db, tenant):
    (m1, _), _ = two_visits(conn, db, tenant)
    sweep(conn, "digests", tenant=tenant)
    first = doctor_digest(conn, tenant)
    m3, t3, _ = note(conn, db, tenant, MAY, "The user booked the doctor again for a follow-up on the rash.")
    sweep(conn, "digests", tenant=tenant)
    d = doctor_digest(conn, tenant)
    assert d["memory_id"] == first["memory_id"]
    assert "(2023-05-20) The user booked the doctor again" in d["content_full"]
    assert t3 in d["source_message_ids"]
    assert versions(conn, tenant, d["memory_id"]) == ["created", "updated"]
    # the March visit superseded by the May note: still listed, as an earlier value
    conn.execute("UPDATE mnemo.memories SET superseded_by = %s, valid_to = %s, updated_at = now()"
                 " WHERE tenant_id = %s AND memory_id = %s", (m3, MAY, tenant, m1))
    sweep(conn, "digests", tenant=tenant)
    d = doctor_digest(conn, tenant)
    assert "(2023-03-03, an earlier value, since superseded) The user saw the doctor" in d["content_full"]
    assert versions(conn, tenant, d["memory_id"]) == ["created", "updated", "updated"]
    # the embedding follows the text: a fresh embed job, the old vector meanwhile
    assert conn.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %s AND dedup_key = %s"
                        " AND status = 'queued'", (tenant, f"memory:{d['memory_id']}")).fetchone()[0] == 1


def test_retired_when_the_group_no_longer_spans_two_sessions(conn, db, tenant):
    (m1, _), _ = two_visits(conn, db, tenant)
    sweep(conn, "digests", tenant=tenant)
    d = doctor_digest(conn, tenant)
    conn.execute("UPDATE mnemo.memories SET is_active = false, updated_at = now() WHERE tenant_id = %s"
                 " AND memory_id = %s", (tenant, m1))
    sweep(conn, "digests", tenant=tenant)
    assert doctor_digest(conn, tenant) is None
    assert conn.execute("SELECT count(*) FROM mnemo.memory_archive WHERE tenant_id = %s AND memory_id = %s",
                        (tenant, d["memory_id"])).fetchone()[0] == 1


def test_sensitivity_scope_and_secrets(conn, db, tenant):
    two_visits(conn, db, tenant)
    note(conn, db, tenant, MAY, "The user told the doctor about a panic attack.", sensitivity="high")
    note(conn, db, tenant, MAY, "The user gave the doctor the insurance number 99-1234.", sensitivity="secret")
    note(conn, db, tenant, MAY, "The user asked the doctor about a local-only matter.", scope="local")
    sweep(conn, "digests", tenant=tenant)
    d = doctor_digest(conn, tenant)
    assert d["sensitivity"] == "high"  # its most sensitive member's
    assert "panic attack" in d["content_full"]
    assert "99-1234" not in d["content_full"] and "local-only" not in d["content_full"]
    # a reader that may not see 'high' does not get it: the public channel
    sid = db.start_session(tenant, started_at=MAY, channel="public")
    run_jobs(db, tenant)
    report = db.compile_context_bundle(tenant, sid, "How many doctors did I see?", budget=2000, log=False)["report"]
    assert f"mem:{d['memory_id']}" not in {i["source"] for i in report["items"]}


def test_one_tenant_only(conn, db, tenant):
    other = "t_" + uuid.uuid4().hex[:12]
    db.create_tenant(other)
    note(conn, db, tenant, MARCH, "The user saw the doctor for a check-up about back pain.")
    note(conn, db, other, APRIL, "The user went to a new doctor, a dermatologist, about a rash.")
    note(conn, db, other, MAY, "The user booked the doctor again for a follow-up on the rash.")
    sweep(conn, "digests", tenant=tenant)
    assert digests_of(conn, tenant) == [] and digests_of(conn, other) == []  # one session each side; other not run
    sweep(conn, "digests", tenant=other)
    d = doctor_digest(conn, other)
    assert d is not None and "back pain" not in d["content_full"]
    owners = conn.execute("SELECT DISTINCT tenant_id FROM mnemo.messages WHERE message_id = ANY(%s)",
                          (d["source_message_ids"],)).fetchall()
    assert owners == [(other,)]
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'", {"t": other})


def test_bad_sizes_get_a_project_sqlstate(conn, tenant):
    conn.execute("CALL mnemo.run_sweep('digests', p_tenant_id => %s)", (tenant,))  # a sweep of the list
    with pytest.raises(psycopg.Error) as e:
        conn.execute("CALL mnemo.run_sweep('digests', p_batch_size => 0)")
    assert e.value.sqlstate == "MN001"
    with pytest.raises(psycopg.Error) as e:
        conn.execute("CALL mnemo.run_sweep('digests', p_now => NULL)")
    assert e.value.sqlstate == "MN001"
