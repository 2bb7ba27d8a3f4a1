"""compile_context end to end: a repository onboarding, as_of, entity and trigram
recall, and the sweeps that fold what compiles sent."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from conftest import DSN
from helpers import (
    assert_tool_pairs_whole,
    assistant_calls,
    prompt_cost,
    run_jobs,
    say,
    text_of,
    tool_call,
)
from mnemo_db.compile.compiler import GENERIC_PLANS_AFTER
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
SYSTEM_PROMPT = "You are a careful coding assistant. Answer from the repository's files."



pytestmark = pytest.mark.usefixtures("drop_leftover_jobs")


# --------------------------------------------------------------------------- 10. e2e
README = """# Acme Ledger

Acme Ledger is a self-hosted invoicing service that turns approved timesheets into
PDF invoices and emails them to clients every Friday.

Run `npm start` and open http://localhost:3000.
"""
PURPOSE = "turns approved timesheets into\nPDF invoices and emails them to clients every Friday"


def _package_json(min_bytes: int) -> str:
    deps, i = {}, 0
    while len(json.dumps(deps)) < min_bytes:
        deps[f"@acme/ledger-module-{i:05d}"] = f"^{i % 9}.{i % 13}.{i % 7}"
        i += 1
    return json.dumps({"name": "acme-ledger", "version": "2.4.0",
                       "scripts": {"start": "node src/server.js"}, "dependencies": deps}, indent=2)


def test_repo_onboarding_end_to_end(db, tenant):
    s = db.start_session(tenant, context_window=128000, system_prompt=SYSTEM_PROMPT)
    db.record_event(tenant, s, "message", {"text": "Please help me onboard onto this repo"})
    decision = db.record_event(tenant, s, "decision", {
        "decision": "Use PostgreSQL for invoices",
        "rationale": ["transactions for invoice numbering", "the team knows it"],
        "alternatives": ["MongoDB"]})
    ls = db.record_event(tenant, s, "tool_call", {"tool": "fs.list_root", "arguments": {}})
    db.record_event(tenant, s, "tool_result", {
        "tool": "fs.list_root", "tool_call_id": ls["tool_call_id"],
        "text": "README.md\npackage.json\nsrc/\ntests/\n.github/"})
    assistant_calls(db, tenant, s,
                     tool_call("call_readme", "fs.read_file", {"path": "README.md"}),
                     tool_call("call_pkg", "fs.read_file", {"path": "package.json"}))
    db.record_event(tenant, s, "tool_result", {"tool": "fs.read_file", "path": "README.md",
                                               "tool_call_id": "call_readme", "text": README})
    package_json = _package_json(80_000)
    pkg = db.record_event(tenant, s, "tool_result", {
        "tool": "fs.read_file", "path": "package.json", "tool_call_id": "call_pkg",
        "text": package_json})
    artifact_id = pkg["artifact_id"]
    assert artifact_id
    db.record_event(tenant, s, "tool_result", {"tool": "fs.grep", "pattern": "createInvoice",
                                               "text": "src/invoices.js:12: createInvoice()"})
    db.record_event(tenant, s, "message", {"text": "I read the README, package.json and "
                                                   "grepped the sources."}, actor={"type": "agent"})
    run_jobs(db, tenant)
    question = db.record_event(tenant, s, "message", {"text": "what is this project for?"})

    bundle = db.compile_context_bundle(tenant, s, budget=3000)
    messages, report = bundle["messages"], bundle["report"]
    MESSAGES.validate_python(messages)
    assert_tool_pairs_whole(messages)
    assert prompt_cost(messages, SYSTEM_PROMPT) <= 3000 == report["budget"]["available"]
    assert report["provenance"]["query"] == "what is this project for?"
    assert messages[-1] == {"role": "user", "content": "what is this project for?"}
    assert f"msg:{question['message_id']}" in {i["source"] for i in report["items"]}
    text = text_of(messages)
    # the README's purpose is in the context
    assert " ".join(PURPOSE.split()) in " ".join(text.split())
    # the large output is an excerpt that names its artifact
    pkg_msgs = [m for m in messages if m.get("tool_call_id") == "call_pkg"]
    assert len(pkg_msgs) == 1 and f"artifact {artifact_id}" in pkg_msgs[0]["content"]
    assert len(pkg_msgs[0]["content"].encode()) < 10_000
    assert {"source": f"msg:{pkg['message_id']}", "reason": "truncated_tool_output",
            "artifact_id": artifact_id} in report["omissions"]
    # the decision is cited
    source = f"mem:{decision['memory_id']}"
    [item] = [i for i in report["items"] if i["source"] == source]
    assert item["section"] == "memory" and item["kind"] == "decision"
    [block] = [m for m in messages[1:] if m["role"] == "system"]
    assert f"[{source} decision" in block["content"]
    assert "Use PostgreSQL for invoices" in block["content"]
    # the full output is one call away, byte-exact
    assert db.get_artifact(tenant, artifact_id) == package_json.encode()


# --------------------------------------------------------------------------- 11. as_of
def test_as_of_sees_the_past(db, tenant):
    s = db.start_session(tenant, context_window=128000)
    now = datetime.now(UTC)
    t = [now - timedelta(hours=h) for h in (5, 4, 3, 2)]
    ids = [say(db, tenant, s, role, text, created_at=at) for role, text, at in zip(
        ("user", "assistant", "user", "assistant"),
        ("Which port does the API use?", "Port 8080.", "Move it to 9090.", "Done: port 9090."),
        t, strict=True)]
    db.record_event(tenant, s, "decision", {"decision": "The API listens on port 9090"})
    run_jobs(db, tenant)

    def sources(opts):
        report = db.compile_context_bundle(tenant, s, **opts)["report"]
        return [i["source"] for i in report["items"]], report

    all_now, _ = sources({})
    assert [f"msg:{i}" for i in ids] == [x for x in all_now if x.startswith("msg:")]
    assert any(x.startswith("mem:") for x in all_now)
    between = (t[2] + timedelta(minutes=30)).isoformat()
    past, report = sources({"as_of": between})
    assert past == [f"msg:{i}" for i in ids[:3]]  # no later message, no later memory
    assert report["provenance"]["query"] == "Move it to 9090."
    messages = db.compile_context(tenant, s, as_of=between)
    assert "Done: port 9090." not in text_of(messages) and "9090" in text_of(messages)
    before_all, _ = sources({"as_of": (t[0] - timedelta(minutes=1)).isoformat()})
    assert before_all == []
    future, _ = sources({"as_of": (now + timedelta(days=1)).isoformat()})
    assert sorted(future) == sorted(all_now)


def test_a_named_speaker_is_an_entity_match(db, tenant):
    """A question about a person favours that person's turns: a message's speaker (its
    `name`) named in the query earns the tag bonus, and the turn outranks a closer
    wording said by someone else."""
    earlier = db.start_session(tenant, context_window=128000)
    maria = db.record_message(tenant, earlier, {
        "role": "user", "name": "Maria", "content": "I started learning the cello last spring."})
    jon = db.record_message(tenant, earlier, {
        "role": "assistant", "name": "Jon",
        "content": "Last spring I started learning an instrument too: the violin."})
    run_jobs(db, tenant)
    s = db.start_session(tenant, context_window=128000)

    def ranked(query):
        items = db.compile_context_bundle(tenant, s, query, budget=100_000,
                                          log=False)["report"]["items"]
        return [i["source"] for i in sorted(items, key=lambda i: -i["score"])
                if i["source"] in (f"msg:{maria}", f"msg:{jon}")]

    assert ranked("Which instrument did Maria start learning last spring?") == [
        f"msg:{maria}", f"msg:{jon}"]
    assert ranked("Which instrument did Jon start learning last spring?") == [
        f"msg:{jon}", f"msg:{maria}"]


def test_a_misspelt_identifier_reaches_its_memory_by_trigram(db, tenant):
    """A short query (a name or identifier) is matched by trigram word similarity, so
    a misspelling still finds the memory full text cannot; a question is not (a
    string comparison per memory that almost never matches)."""
    s = db.start_session(tenant, context_window=128000)
    target = db.remember(tenant, "The release checklist lives in docs/release_checklist_v2.md",
                         kind="fact")
    for i in range(5):
        db.remember(tenant, f"Unrelated note {i}: the cafeteria opens at {i + 7} am.", kind="fact")
    run_jobs(db, tenant)

    def found(query):
        report = db.compile_context_bundle(tenant, s, query, log=False)["report"]
        return report["provenance"]["retrievers"].get("trigram", 0), [
            i["source"] for i in report["items"] if i["section"] == "memory"]

    hits, sources = found("release_cheklist_v2")
    assert hits == 1 and f"mem:{target}" in sources
    # as similar (word_similarity 0.94), but five words: full text's to find
    assert found("release cheklist lives in docs")[0] == 0


def test_embed_job_counts_each_document_once_into_the_lexicon(db, tenant, session):
    """BM25 statistics: the first embedding of a message adds it to mnemo.lexicon (one
    document per distinct lexeme, plus totals on lexeme ''); nothing is counted twice."""
    say(db, tenant, session, "user", "Invoices invoices live in PostgreSQL")
    say(db, tenant, session, "user", "Refunds live in S3")
    run_jobs(db, tenant)

    def lexicon():
        return dict(db.conn.execute(
            "SELECT lexeme, ARRAY[doc_count, total_length] FROM mnemo.lexicon"
            " WHERE tenant_id = %s", (tenant,)).fetchall())

    first = lexicon()
    assert first[""] == [2, 6]  # two documents: 3 + 3 distinct lexemes
    assert first["live"] == [2, 0] and first["invoic"] == [1, 0] and first["refund"] == [1, 0]
    db.conn.execute("SELECT mnemo_internal.enqueue_job(%s, 'embed', 'again', jsonb_build_object("
                    "'target', 'message', 'message_id', message_id, 'created_at', created_at))"
                    " FROM mnemo.messages WHERE tenant_id = %s LIMIT 1", (tenant, tenant))
    run_jobs(db, tenant)
    assert lexicon() == first  # a re-embedding is not a new document


def test_access_sweep_folds_context_log_into_access_statistics(db, tenant, session):
    m = db.record_event(tenant, session, "decision", {"decision": "Bill in arrears"})
    run_jobs(db, tenant)
    jobs_before = db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s", {"t": tenant})
    access = ("SELECT coalesce(a.access_count, 0), a.last_accessed_at FROM mnemo.memories AS m"
              " LEFT JOIN mnemo.memory_access AS a USING (tenant_id, memory_id)"
              " WHERE m.tenant_id = %s AND m.memory_id = %s")
    # The 'access' sweep's lock held meanwhile (mnemo.run_sweep takes one per sweep),
    # so that pg_cron's 'access' job (it polls all the time) returns at once and
    # cannot fold these rows first: the batch function itself, a batch of one row at
    # a time. (Not one transaction rolled back: on Citus the API writes as
    # mnemo_api_owner, and a read as another user of what it wrote in the same
    # transaction is refused.)
    lock = "SELECT pg_advisory_{}lock(hashtext('mnemo.run_sweep'), hashtext('access'))"
    with psycopg.connect(DSN, autocommit=True) as holder:
        holder.execute(lock.format(""))
        c = db.conn
        for _ in range(2):
            bundle = c.execute("SELECT mnemo.compile_context_bundle(%s, %s, 'how do we bill?')",
                               (tenant, session)).fetchone()[0]
            assert f"mem:{m['memory_id']}" in {i["source"] for i in bundle["report"]["items"]}
        # the compile writes its log row and nothing else
        assert c.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %s", (tenant,)).fetchone()[0] \
            == jobs_before
        assert c.execute(access, (tenant, m["memory_id"])).fetchone() == (0, None)
        batches = [c.execute("SELECT mnemo_internal.sweep_access(now(), %s, 1, '{}')", (tenant,)).fetchone()[0]
                   for _ in range(3)]
        assert [(b["counts"], b["done"]) for b in batches] == [
            ({"contexts": 1, "memories_updated": 1}, False), ({"contexts": 1, "memories_updated": 1}, False),
            ({"contexts": 0, "memories_updated": 0}, True)]
        count, last = c.execute(access, (tenant, m["memory_id"])).fetchone()
        assert count == 2 and last is not None
        assert c.execute("SELECT bool_and(accounted) FROM mnemo.context_log WHERE tenant_id = %s",
                         (tenant,)).fetchone()[0]
        holder.execute(lock.format("un"))
    # Then the rows are folded by whoever comes first, pg_cron's poller or this run
    # (which returns at once while the poller holds the sweep's lock); once.
    for _ in range(2):
        db.compile_context_bundle(tenant, session, "how do we bill?")
    deadline = time.monotonic() + 20
    while db.conn.execute(access, (tenant, m["memory_id"])).fetchone()[0] < 4 and time.monotonic() < deadline:
        db.run_sweep("access", tenant_id=tenant)
        time.sleep(0.5)
    assert db.conn.execute(access, (tenant, m["memory_id"])).fetchone()[0] == 4
    db.run_sweep("access", tenant_id=tenant)
    assert db.conn.execute(access, (tenant, m["memory_id"])).fetchone()[0] == 4  # a row is counted once
    # the statistics go with their memory
    db.conn.execute("DELETE FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s", (tenant, m["memory_id"]))
    assert db.conn.execute("SELECT count(*) FROM mnemo.memory_access WHERE tenant_id = %s",
                           (tenant,)).fetchone()[0] == 0


def test_a_sweep_with_max_seconds_looks_again_until_then(db, tenant):
    """run_sweep's p_max_seconds (the 'access' job polls so): after its pass it looks
    again every 5 s until that many seconds from its start, in one recorded run."""
    for _ in range(3):  # pg_cron's own run of the sweep may hold its lock for a moment
        before = db.conn.execute("SELECT coalesce(max(run_id), 0) FROM mnemo_internal.lifecycle_runs").fetchone()[0]
        t0 = time.monotonic()
        db.run_sweep("working_memory", tenant_id=tenant, max_seconds=7)
        took = time.monotonic() - t0
        run = db.conn.execute("SELECT status, batches FROM mnemo_internal.lifecycle_runs WHERE run_id > %s"
                              " AND sweep = 'working_memory' AND tenant_id = %s", (before, tenant)).fetchone()
        if run:
            break
        time.sleep(1)
    assert run == ("done", 2) and 5 <= took < 7 + 5
    with pytest.raises(psycopg.Error) as e:
        db.conn.execute("CALL mnemo.run_sweep('working_memory', now(), %s, NULL, 100000, -1)", (tenant,))
    assert e.value.sqlstate == "MN001"


def test_a_new_backend_plans_for_its_tenant_then_for_every_tenant(db, tenant):
    """A backend's first compiles plan their statements for the tenant at hand (custom
    plans: the other tenants' hash partitions are pruned at planning, so the backend
    opens and caches only its tenant's); a backend that has compiled
    GENERIC_PLANS_AFTER times switches to generic plans over every partition."""
    session = db.start_session(tenant, context_window=8192)
    for i in range(4):
        say(db, tenant, session, "user" if i % 2 == 0 else "assistant", f"turn {i} about the staging database")
    with psycopg.connect(DSN, autocommit=True) as conn:
        hashes = conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'mnemo.messages'::regclass"
                              ).fetchone()[0]

        def compile_and_count_opened() -> int:
            conn.execute("SELECT mnemo.compile_context(%s, %s, 'what about staging?', '{\"log\": false}')",
                         (tenant, session))
            # each index the backend has opened keeps a relation cache entry with its name
            return conn.execute(
                "SELECT count(DISTINCT substring(ident FROM '^messages_h[0-9]+'))"
                " FROM pg_backend_memory_contexts WHERE name = 'index info' AND ident ~ '^messages_h[0-9]+'"
            ).fetchone()[0]

        assert compile_and_count_opened() == 1
        for _ in range(GENERIC_PLANS_AFTER - 1):
            opened = compile_and_count_opened()
        assert opened == 1
        assert compile_and_count_opened() == hashes > 1
