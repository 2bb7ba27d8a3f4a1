"""One encoding per new user message (issue 43): a compile whose query is the last
user message, recorded and not yet embedded, hands its vector to that message's embed
job, which stores it instead of encoding the same text again (phases.share_query_vector,
mnemo_internal.run_embed_jobs). Real PostgreSQL, the real model."""

from __future__ import annotations

import hashlib
import json
import uuid

import psycopg
import pytest
from conftest import DSN, drain_jobs

WORKER = 18
QUESTION = "Where does the retry logic for the HTTP client live, and who wrote it?"


def embed_job(db, tenant: str) -> dict:
    rows = db._rows("SELECT status, payload FROM mnemo.jobs WHERE tenant_id = %(t)s AND kind = 'embed'"
                    " ORDER BY job_id DESC LIMIT 1", {"t": tenant})
    return rows[0]


def stored_vector(db, tenant: str, content: str) -> str:
    return db._call("SELECT embedding::text FROM mnemo.messages WHERE tenant_id = %(t)s AND content = %(c)s",
                    {"t": tenant, "c": content})


def vector_of(db, text: str) -> str:
    return db._call("SELECT mnemo.embed(%(x)s)::text", {"x": text})


def test_the_compile_hands_its_query_vector_to_the_message_job(db, tenant, session):
    db.record_message(tenant, session, {"role": "user", "content": QUESTION})
    db.compile_context(tenant, session)
    job = embed_job(db, tenant)
    assert job["status"] == "queued"
    assert job["payload"]["vector"] == vector_of(db, QUESTION)
    drain_jobs(db, tenant, WORKER)
    # stored as the job would have stored its own encoding: the same bytes
    assert stored_vector(db, tenant, QUESTION) == vector_of(db, QUESTION)
    job = embed_job(db, tenant)
    assert job["status"] == "done" and "vector" not in job["payload"] and "text_md5" not in job["payload"]


@pytest.mark.parametrize("text_md5", ["kept", "of another text"])
def test_the_job_uses_the_handed_vector_only_for_its_own_text(db, tenant, session, text_md5):
    """The job stores the vector it was handed, without encoding (an other text's vector
    put in its place is what it stores), but only while the text is the one embedded
    (text_md5): else it encodes, as without the hand-over."""
    db.record_message(tenant, session, {"role": "user", "content": QUESTION})
    db.compile_context(tenant, session)
    other = vector_of(db, "A sentence about something else entirely.")
    # the new keys built here: Citus takes no CASE over non-immutable functions in SET
    swap = {"vector": other, **({} if text_md5 == "kept" else {"text_md5": hashlib.md5(b"another text").hexdigest()})}
    db._call("UPDATE mnemo.jobs SET payload = payload || %(swap)s::jsonb"
             " WHERE tenant_id = %(t)s AND kind = 'embed' AND payload ? 'vector'",
             {"t": tenant, "swap": json.dumps(swap)})
    drain_jobs(db, tenant, WORKER)
    expected = other if text_md5 == "kept" else vector_of(db, QUESTION)
    assert stored_vector(db, tenant, QUESTION) == expected


@pytest.mark.parametrize("case", ["caller_query", "named", "not_logged", "embedded_already"])
def test_no_vector_is_handed_where_the_job_embeds_another_text(db, tenant, session, case):
    message = {"role": "user", "content": QUESTION, **({"name": "alice"} if case == "named" else {})}
    db.record_message(tenant, session, message)
    if case == "embedded_already":
        drain_jobs(db, tenant, WORKER)
        db.record_message(tenant, session, {"role": "assistant", "content": "In src/client/http.py."})
    options = {"log": False} if case == "not_logged" else {}
    db.compile_context(tenant, session, "retry logic" if case == "caller_query" else None, **options)
    assert not db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND payload ? 'vector'",
                        {"t": tenant})


def test_contexts_and_vectors_are_the_same_with_and_without_the_hand_over(db):
    """Two tenants record the same conversation and compile after each user message:
    one with the default query (the vector handed over), the other giving that same
    message as the query (nothing handed over). After their jobs, every stored vector
    is the same, and so is the next context."""
    turns = [("user", QUESTION), ("assistant", "In src/client/http.py, send_with_retry; Dana wrote it."),
             ("user", "Add a jitter to the backoff."), ("assistant", "Done: a random 0-100 ms jitter."),
             ("user", "Which tests cover the backoff?")]
    tenants, sessions = [], []
    for i in range(2):
        t = f"t_qv{i}_" + uuid.uuid4().hex[:10]
        db.create_tenant(t)
        tenants.append(t)
        sessions.append(db.start_session(t, context_window=8192))
    for role, text in turns:
        for t, s in zip(tenants, sessions):
            db.record_message(t, s, {"role": role, "content": text})
            if role == "user":
                db.compile_context(t, s, None if t == tenants[0] else text)
    assert db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND payload ? 'vector'",
                    {"t": tenants[0]}) == 3
    for t in tenants:
        drain_jobs(db, t, WORKER)
    vectors = [db._rows("SELECT turn_index, embedding::text AS v FROM mnemo.messages WHERE tenant_id = %(t)s"
                        " ORDER BY turn_index", {"t": t}) for t in tenants]
    assert vectors[0] == vectors[1] and all(r["v"] for r in vectors[0])
    assert not db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND payload ? 'vector'",
                        {"t": tenants[1]})
    contexts = [db.compile_context(t, s, "Who wrote the retry logic?")
                for t, s in zip(tenants, sessions)]
    assert json.dumps(contexts[0]) == json.dumps(contexts[1])


def test_a_job_a_runner_holds_is_skipped_not_waited_for(db, tenant, session):
    """A runner that has claimed the job (FOR UPDATE) holds it while it encodes: the
    compile goes on without handing its vector over, and the runner encodes."""
    db.record_message(tenant, session, {"role": "user", "content": QUESTION})
    with psycopg.connect(DSN) as runner:
        runner.execute("SELECT job_id FROM mnemo.jobs WHERE tenant_id = %s AND kind = 'embed' FOR UPDATE",
                       (tenant,)).fetchall()
        db._call("SET lock_timeout = '2s'", {})
        try:
            assert db.compile_context(tenant, session)
        finally:
            db._call("RESET lock_timeout", {})
        runner.rollback()
    assert "vector" not in embed_job(db, tenant)["payload"]
