"""Issue 20, defects 1 and 9: every API function answers bad input with a project
SQLSTATE and writes nothing, and no stored row can break a tenant's reads.

Defect 1: an extreme p_created_at (year 294276, 4713 BC, infinity) was stored, and then
every compile_context of the tenant failed in Python (`year 294276 is out of range`,
38000). Every timestamp the API accepts now goes through one range check
(mnemo_internal.checked_timestamp: years 2-9998 UTC), and rows stored before it are
read without failing.
Defect 9: deep JSON raised RecursionError (only on some paths, so validity depended on
the content), remember's source_message_ids [{}] TypeError and [1e30] 22003,
record_event's sensitivity 23514, ordinary queries a NOTICE, and project errors from
PL/Python arrived as 'plpy.SPIError: ...'.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from conftest import DSN

from mnemosyne import errors

EXTREMES = ["294276-12-31", "4713-01-01 BC", "infinity", "-infinity", "0001-06-01", "10000-01-01"]
DEEP = "[" * 1200 + "1" + "]" * 1200


def _counts(db, tenant: str) -> dict:
    return {t: db._call(f"SELECT count(*) FROM mnemo.{t} WHERE tenant_id = %(t)s", {"t": tenant})
            for t in ("messages", "memories", "memory_tasks", "artifacts", "jobs", "tool_calls", "context_log")}


def _timestamp_calls(tenant, sid):
    """(description, SQL) for every API path that takes a timestamp, with {ts} for it."""
    return [
        ("record_message p_created_at",
         (f"SELECT mnemo.record_message('{tenant}', '{sid}', '{{\"role\": \"user\", \"content\": \"hi\"}}',"
         " p_created_at => %(ts)s::timestamptz)")),
        ("record_event message p_created_at",
         (f"SELECT mnemo.record_event('{tenant}', '{sid}', 'message', '{{\"text\": \"hi\"}}',"
         " p_created_at => %(ts)s::timestamptz)")),
        ("record_event tool_call p_created_at",
         (f"SELECT mnemo.record_event('{tenant}', '{sid}', 'tool_call', '{{\"tool\": \"shell\"}}',"
         " p_created_at => %(ts)s::timestamptz)")),
        ("record_event task_update due_at",
         (f"SELECT mnemo.record_event('{tenant}', '{sid}', 'task_update',"
         " jsonb_build_object('title', 'ship it', 'due_at', %(ts)s::text))")),
        ("remember options.due_at",
         f"SELECT mnemo.remember('{tenant}', 'ship it', 'task', NULL, jsonb_build_object('due_at', %(ts)s::text))"),
        ("forget filter.created_before",
         f"SELECT mnemo.forget('{tenant}', NULL, jsonb_build_object('created_before', %(ts)s::text))"),
        ("compile_context options.as_of",
         f"SELECT mnemo.compile_context('{tenant}', '{sid}', NULL, jsonb_build_object('as_of', %(ts)s::text))"),
    ]


@pytest.mark.parametrize("ts", EXTREMES)
def test_extreme_timestamps_are_refused_everywhere_and_nothing_is_written(db, tenant, session, ts):
    before = _counts(db, tenant)
    for what, sql in _timestamp_calls(tenant, session):
        # MN001, or MN004 where the timestamp is part of an event's content
        with pytest.raises((errors.InvalidParameter, errors.InvalidMessage)) as info:
            db._call(sql, {"ts": ts})
        assert "timestamp" in info.value.message, what
    assert _counts(db, tenant) == before
    # the range's ends are accepted
    for ok in ("0002-01-01 00:00+00", "9998-12-31 23:59:59+00"):
        db.record_message(tenant, session, {"role": "user", "content": "edge"}, created_at=ok)


def test_rows_stored_with_extreme_timestamps_do_not_break_the_tenant(db, tenant):
    """Rows written before the range check (or by hand) hold any timestamp PostgreSQL
    does: the tenant's compiles, of that session and of the others, still work."""
    poisoned, other = db.start_session(tenant), db.start_session(tenant)
    for text in ("I live in Paris", "The deploy target is Fly.io", "I prefer tea", "We use PostgreSQL"):
        db.record_message(tenant, poisoned, {"role": "user", "content": text})
        db.record_message(tenant, other, {"role": "user", "content": text + " too"})
    mids = [db.remember(tenant, f"Memory number {i} about Paris") for i in range(4)]
    for ts, turn in zip(EXTREMES[:4], range(4), strict=True):
        db._call("UPDATE mnemo.messages SET created_at = %(ts)s::timestamptz"
                 " WHERE tenant_id = %(t)s AND session_id = %(s)s AND turn_index = %(n)s",
                 {"ts": ts, "t": tenant, "s": poisoned, "n": turn})
    for ts, mid in zip(EXTREMES[:4], mids, strict=True):
        db._call("UPDATE mnemo.memories SET created_at = %(ts)s::timestamptz, valid_from = %(ts)s::timestamptz"
                 " WHERE tenant_id = %(t)s AND memory_id = %(m)s", {"ts": ts, "t": tenant, "m": mid})
        db._call("INSERT INTO mnemo.memory_access (tenant_id, memory_id, access_count, last_accessed_at)"
                 " VALUES (%(t)s, %(m)s, 3, %(ts)s::timestamptz)"
                 " ON CONFLICT (tenant_id, memory_id) DO UPDATE SET last_accessed_at = excluded.last_accessed_at",
                 {"ts": ts, "t": tenant, "m": mid})
    for sid in (poisoned, other):
        for query in ("Where do I live? Paris", None):
            bundle = db.compile_context_bundle(tenant, sid, query, budget=3000)
            assert bundle["messages"]
        assert db.compile_context(tenant, sid, "Paris", as_of="2200-01-01")


# --------------------------------------------------------------------------- defect 9
# The JSON arguments of the API, with calls that are valid but for that argument.
JSON_ARGUMENTS = {
    "record_message p_message": "SELECT mnemo.record_message(%(t)s, %(s)s, {j})",
    "record_message p_metadata": "SELECT mnemo.record_message(%(t)s, %(s)s,"
                                 " '{{\"role\": \"user\", \"content\": \"my password is hunter2\"}}', p_metadata => {j})",
    "record_message p_metadata (no secret)": "SELECT mnemo.record_message(%(t)s, %(s)s,"
                                             " '{{\"role\": \"user\", \"content\": \"hi\"}}', p_metadata => {j})",
    "record_event p_content": "SELECT mnemo.record_event(%(t)s, %(s)s, 'message', {j})",
    "record_event p_actor": "SELECT mnemo.record_event(%(t)s, %(s)s, 'message', '{{\"text\": \"hi\"}}', {j})",
    "remember p_options": "SELECT mnemo.remember(%(t)s, 'my password is hunter2', 'note', NULL, {j})",
    "forget p_filter": "SELECT mnemo.forget(%(t)s, NULL, {j})",
    "query_decisions p_options": "SELECT mnemo.query_decisions(%(t)s, 'database', {j})",
    "compile_context p_options": "SELECT mnemo.compile_context(%(t)s, %(s)s, 'password', {j})",
    "compile_context_bundle p_options": "SELECT mnemo.compile_context_bundle(%(t)s, %(s)s, NULL, {j})",
    "start_session p_config": "SELECT mnemo.start_session(%(t)s, p_config => {j})",
    "start_session p_metadata": "SELECT mnemo.start_session(%(t)s, p_metadata => {j})",
    "create_tenant p_config": "SELECT mnemo.create_tenant(%(t)s || '_x', p_config => {j})",
    "list_sessions p_options": "SELECT mnemo.list_sessions(%(t)s, {j})",
    "search p_options": "SELECT mnemo.search(%(t)s, 'database', {j})",
    "build_acb p_options": "SELECT mnemo.build_acb(%(t)s, %(s)s, p_options => {j})",
    "open_session p_metadata": "SELECT mnemo.open_session(%(t)s, 'conv:deep', p_metadata => {j})",
    "sync_messages p_messages": "SELECT mnemo.sync_messages(%(t)s, %(s)s, {j})",
    "sync_messages p_metadata": "SELECT mnemo.sync_messages(%(t)s, %(s)s,"
                                " '[{{\"role\": \"user\", \"content\": \"hi\"}}]', p_metadata => {j})",
    "handle_tool_call p_tool_call": "SELECT mnemo.handle_tool_call(%(t)s, %(s)s, {j})",
}


def test_every_jsonb_argument_of_the_api_is_listed(db):
    listed = {k.split(" (")[0] for k in JSON_ARGUMENTS}
    catalog = {f"{name} {arg}" for name, arg in db.conn.execute(
        "SELECT p.proname, a.name FROM pg_proc AS p CROSS JOIN LATERAL unnest(p.proargnames, p.proargtypes::oid[])"
        " AS a (name, type) WHERE p.pronamespace = 'mnemo'::regnamespace AND a.type = 'jsonb'::regtype"
        " AND has_function_privilege('mnemo_app', p.oid, 'EXECUTE')").fetchall()}
    assert catalog == listed


@pytest.mark.parametrize("what", sorted(JSON_ARGUMENTS))
@pytest.mark.parametrize("nesting", ["[", "{"])
def test_json_nested_too_deep_is_mn001_whatever_the_content(db, tenant, session, what, nesting):
    value = DEEP if nesting == "[" else '{"a": ' * 1200 + "1" + "}" * 1200
    if what.endswith(("p_message", "p_content", "p_options", "p_filter", "p_config", "p_metadata", "p_actor",
                      "(no secret)")) and nesting == "[":
        value = '{"x": ' + value + "}"  # the argument's own type is an object
    before = _counts(db, tenant)
    with pytest.raises(errors.InvalidParameter) as info:
        db._call(JSON_ARGUMENTS[what].format(j="%(j)s::jsonb"), {"t": tenant, "s": session, "j": value})
    assert "nested deeper than 64 levels" in info.value.message
    assert _counts(db, tenant) == before
    # 64 levels are accepted where the argument may be any object
    if what == "record_message p_metadata (no secret)":
        db._call(JSON_ARGUMENTS[what].format(j="%(j)s::jsonb"),
                 {"t": tenant, "s": session, "j": '{"x": ' + "[" * 63 + "1" + "]" * 63 + "}"})


@pytest.mark.parametrize("options", [{"source_message_ids": [{}]}, {"source_message_ids": [1e30]},
                                     {"source_message_ids": [1.5]}, {"source_message_ids": ["12"]},
                                     {"source_message_ids": [0]}, {"entities": [7]}, {"tags": [{}]},
                                     {"pinned": "yes"}, {"fact": {"subject": "a", "predicate": "b", "object": "c",
                                                                  "functional": "no"}}])
def test_remember_refuses_option_values_of_the_wrong_shape(db, tenant, options):
    with pytest.raises(errors.InvalidParameter):
        db.remember(tenant, "The deploy target is Fly.io", options=options)
    assert _counts(db, tenant)["memories"] == 0


def test_remember_sources_must_be_the_tenants_messages(db, tenant, session):
    """Found by the fuzzer's consistency checks: remember stored another tenant's (or
    no) message ids as a memory's sources."""
    other = db.create_tenant(tenant + "_other")
    theirs = db.record_message(other, db.start_session(other), {"role": "user", "content": "theirs"})
    mine = db.record_message(tenant, session, {"role": "user", "content": "mine"})
    for ids in ([theirs], [mine, theirs], [mine + 10_000_000]):
        with pytest.raises(errors.NotFound):
            db.remember(tenant, "The deploy target is Fly.io", options={"source_message_ids": ids})
    assert _counts(db, tenant)["memories"] == 0
    mid = db.remember(tenant, "The deploy target is Fly.io", options={"source_message_ids": [mine]})
    assert db._call("SELECT source_message_ids FROM mnemo.memories WHERE tenant_id = %(t)s AND memory_id = %(m)s",
                    {"t": tenant, "m": mid}) == [mine]


def test_record_event_refuses_an_unknown_sensitivity_like_record_message(db, tenant, session):
    for kind, content in (("task_update", {"title": "ship it"}), ("decision", {"decision": "Use PostgreSQL"}),
                          ("message", {"text": "hi"}), ("artifact", {"text": "x"})):
        with pytest.raises(errors.InvalidParameter) as info:
            db.record_event(tenant, session, kind, content, sensitivity="bogus")
        assert "sensitivity" in info.value.message
    assert _counts(db, tenant)["memories"] == 0 and _counts(db, tenant)["artifacts"] == 0


def test_ordinary_queries_raise_no_notice(tenant):
    notices = []
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.add_notice_handler(lambda n: notices.append(n.message_primary))
        sid = conn.execute("SELECT mnemo.start_session(%s)", (tenant,)).fetchone()[0]
        conn.execute("SELECT mnemo.record_message(%s, %s, %s::jsonb)",
                     (tenant, sid, json.dumps({"role": "user", "content": "What is it?"})))
        conn.execute("SELECT mnemo.record_event(%s, %s, 'decision', '{\"decision\": \"Use PostgreSQL\"}')",
                     (tenant, sid))
        for query in ("the of a", "what is it?", "it", ""):
            conn.execute("SELECT mnemo.query_decisions(%s, %s)", (tenant, query))
            conn.execute("SELECT mnemo.compile_context(%s, %s, %s)", (tenant, sid, query))
    assert notices == []


def test_project_errors_from_python_read_cleanly(db, tenant, session):
    cases = [
        (lambda: db.compile_context(tenant, session, bugdet=1), errors.InvalidParameter),
        (lambda: db.compile_context_bundle(tenant, session, task_type=["x"]), errors.InvalidParameter),
        (lambda: db.compile_context(tenant, session, as_of="infinity"), errors.InvalidParameter),
        (lambda: db.compile_context("no_such_tenant_x", session), errors.UnknownTenant),
    ]
    for call, exc in cases:
        with pytest.raises(exc) as info:
            call()
        assert not info.value.message.startswith("plpy"), info.value.message
        assert info.value.hint != "None"


@pytest.mark.parametrize("stored", ["infinity", "-infinity", "294276-12-31 00:00:00+00", "4713-01-01 00:00:00+00 BC"])
def test_the_clients_read_any_timestamp_a_row_may_hold(db, tenant, session, stored):
    """A row stored before the range check (here: written by the owner directly) holds
    a timestamp no datetime can: the clients' listings read it as the nearest one
    instead of failing (psycopg raised DataError for every listing of every tenant)."""
    db.record_message(tenant, session, {"role": "user", "content": "hello"})
    db._call("UPDATE mnemo.messages SET created_at = %(c)s::timestamptz WHERE tenant_id = %(t)s",
             {"c": stored, "t": tenant})
    db._call("UPDATE mnemo.sessions SET created_at = %(c)s::timestamptz WHERE tenant_id = %(t)s",
             {"c": stored, "t": tenant})
    [row] = db.list_sessions(tenant)
    assert row["created_at"].year in (1, 9999) and row["last_message_at"].year in (1, 9999)
    assert any(t["tenant_id"] == tenant for t in db.list_tenants())
    assert db.export_tenant(tenant)


def test_data_the_api_accepts_never_fails_the_jobs(db, tenant, session):
    """Found by fuzzing: tool-call arguments nested past Python's recursion limit (a
    string, so the API stores them) failed the session's extract job (RecursionError),
    and a stored extreme created_at failed extract and embed jobs."""
    deep_args = "[" * 1200 + "]" * 1200
    db.record_message(tenant, session, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": deep_args}}]})
    db.record_message(tenant, session, {"role": "tool", "tool_call_id": "c1", "content": "Error: disk full\n" * 40})
    db.record_message(tenant, session, {"role": "user", "content": "I live in Paris and I need it by Friday. " * 20})
    db._call("UPDATE mnemo.messages SET created_at = 'infinity' WHERE tenant_id = %(t)s AND turn_index = 2",
             {"t": tenant})
    out = db._call("SELECT mnemo_internal.extract(%(t)s, %(p)s)",
                   {"t": tenant, "p": json.dumps({"session_id": str(session)})})
    assert out is not None
    for mid, epoch in db.conn.execute(
            "SELECT message_id, extract(epoch FROM created_at)::float8 FROM mnemo.messages"
            " WHERE tenant_id = %s", (tenant,)).fetchall():
        db._call("SELECT mnemo_internal.message_levels(content, role, token_count, %(e)s) FROM mnemo.messages"
                 " WHERE tenant_id = %(t)s AND message_id = %(m)s", {"e": epoch, "t": tenant, "m": mid})
