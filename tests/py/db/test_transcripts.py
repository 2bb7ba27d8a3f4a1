"""The proxy's write path in the database (mnemo.open_session, mnemo.sync_messages,
migration 0020) and its conversions (Anthropic <-> OpenAI, the wire hash)."""

from __future__ import annotations

import copy
import json
import threading
import uuid

import psycopg
import pytest
from conftest import DSN
from consistency import violations
from mnemo_db.transcript import wire_hash

from mnemosyne import connect
from mnemosyne.errors import (
    InvalidMessage,
    InvalidParameter,
    MnemoError,
    UnknownSession,
    UnknownTenant,
)
from mnemosyne.proxy import anthropic_format as af


def messages_of(db, tenant, sid) -> list[tuple[str, str | None, bool]]:
    return [(r["role"], r["content"], r["is_compacted"]) for r in db._rows(
        "SELECT role, content, is_compacted FROM mnemo.messages WHERE tenant_id = %(t)s AND session_id = %(s)s"
        " ORDER BY turn_index", {"t": tenant, "s": sid})]


# ------------------------------------------------------------------------ open_session
def test_open_session_is_idempotent_and_follows_the_call(db, tenant):
    a = db.open_session(tenant, "conv:abc", system_prompt="Be brief.", model="m1", response_reserve=1000)
    b = db.open_session(tenant, "conv:abc", system_prompt="Be brief.", model="m2", context_window=64000,
                        response_reserve=2000)
    assert a == b
    assert db._rows("SELECT model, context_window, response_reserve FROM mnemo.sessions"
                    " WHERE session_id = %(s)s", {"s": a}) == [
        {"model": "m2", "context_window": 64000, "response_reserve": 2000}]


def test_concurrent_first_calls_open_one_session(tenant):
    got: list[uuid.UUID] = []

    def open_it():
        with connect(DSN) as m:
            got.append(m.open_session(tenant, "conv:race", system_prompt="p"))

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 6 and len(set(got)) == 1


def test_a_changed_system_prompt_or_a_closed_session_opens_a_child(db, tenant):
    first = db.open_session(tenant, "conv:k", system_prompt="v1")
    second = db.open_session(tenant, "conv:k", system_prompt="v2")
    assert second != first
    db._call("UPDATE mnemo.sessions SET status = 'closed' WHERE session_id = %(s)s", {"s": second})
    third = db.open_session(tenant, "conv:k", system_prompt="v2")
    parents = db._rows("SELECT session_id, parent_session_id FROM mnemo.sessions WHERE session_id IN"
                       " (%(b)s, %(c)s) ORDER BY created_at", {"b": second, "c": third})
    assert [(p["session_id"], p["parent_session_id"]) for p in parents] == [(second, first), (third, second)]


def test_a_uuid_key_adopts_its_session_or_opens_it(db, tenant):
    started = db.start_session(tenant)
    assert db.open_session(tenant, str(started)) == started
    fresh = uuid.uuid4()
    assert db.open_session(tenant, str(fresh)) == fresh


def test_a_uuid_key_of_a_session_opened_under_another_key_is_that_session(db, tenant):
    """Found by the fuzzer (23505 on the transcripts' session index): a session opened
    under one key, then named by its id, is the same session with the same transcript."""
    sid = db.open_session(tenant, "conv:first")
    assert db.sync_messages(tenant, sid, [{"role": "user", "content": "hi"}])["recorded"] == 1
    assert db.open_session(tenant, str(sid)) == sid
    assert db.sync_messages(tenant, sid, [{"role": "user", "content": "hi"}])["recorded"] == 0


def test_tool_call_arguments_nested_past_the_parser_limit_are_synced(db, tenant):
    """Found by the fuzzer (RecursionError in wire_hashes): the API stores any string as
    a tool call's arguments, JSON nested thousands deep too; its hash is of the text."""
    sid = db.open_session(tenant, "conv:deep")
    deep = "[" * 5000 + "]" * 5000
    sent = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": deep}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert db.sync_messages(tenant, sid, sent)["recorded"] == 3
    assert db.sync_messages(tenant, sid, sent)["recorded"] == 0
    assert wire_hash(sent[1]) != wire_hash({**sent[1], "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": deep[1:-1]}}]})


@pytest.mark.parametrize("part_type", [{"a": 1}, ["thinking"], 7, None])
def test_a_content_part_of_any_type_is_hashed_then_judged_by_record_message(db, tenant, part_type):
    """Found by the fuzzer (TypeError: unhashable type: 'dict' in wire_hashes): a content
    part's type may be any JSON; the hash takes it, record_message then says whether
    the part is valid (a project error, or recorded)."""
    sid = db.open_session(tenant, f"conv:part:{part_type!r}")
    try:
        db.sync_messages(tenant, sid, [{"role": "user", "content": [{"type": part_type, "text": "x"}]}])
    except MnemoError as e:
        assert e.sqlstate.startswith("MN")
    assert wire_hash({"role": "user", "content": [{"type": part_type, "text": "x"}]})


def test_open_session_refuses_bad_keys_and_unknown_tenants(db, tenant):
    with pytest.raises(InvalidParameter):
        db.open_session(tenant, "")
    with pytest.raises(InvalidParameter):
        db.open_session(tenant, "k" * 513)
    with pytest.raises(UnknownTenant):
        db.open_session("no_such_" + uuid.uuid4().hex[:8], "conv:x")


# ------------------------------------------------------------------------ sync_messages
def test_what_clients_rewrite_between_calls_records_nothing(db, tenant):
    sid = db.open_session(tenant, "conv:w")
    call = {"id": "call_1", "type": "function", "function": {"name": "grep", "arguments": '{"q": "x", "n": 2}'}}
    sent = [{"role": "user", "content": [{"type": "text", "text": "find x", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                              {"type": "text", "text": "Searching."}], "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "x found"}]
    assert db.sync_messages(tenant, sid, sent)["recorded"] == 3
    # the cache breakpoint moved, thinking left out, text as a string, arguments re-serialized
    again = [{"role": "user", "content": "find x"},
             {"role": "assistant", "content": "Searching.", "refusal": None, "tool_calls": [
                 {**call, "function": {"name": "grep", "arguments": '{"n":2,"q":"x"}'}}]},
             {"role": "tool", "tool_call_id": "call_1",
              "content": [{"type": "text", "text": "x found", "cache_control": {"type": "ephemeral"}}]}]
    out = db.sync_messages(tenant, sid, again)
    assert (out["recorded"], out["rewound"], out["positions"]) == (0, None, 3)
    # but a different text is a different message
    assert wire_hash({"role": "user", "content": "find x"}) != wire_hash({"role": "user", "content": "find y"})


def test_a_rewritten_turn_may_reuse_its_tool_call_ids(db, tenant):
    sid = db.open_session(tenant, "conv:t")
    call = {"id": "call_7", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    db.sync_messages(tenant, sid, [{"role": "user", "content": "list"},
                                   {"role": "assistant", "content": None, "tool_calls": [call]},
                                   {"role": "tool", "tool_call_id": "call_7", "content": "a b c (long output)"}])
    # a client that shortens old tool outputs (compaction) resends the result changed
    out = db.sync_messages(tenant, sid, [{"role": "user", "content": "list"},
                                         {"role": "assistant", "content": None, "tool_calls": [call]},
                                         {"role": "tool", "tool_call_id": "call_7", "content": "[cleared]"},
                                         {"role": "user", "content": "next"}])
    assert out["rewound"] == {"position": 2, "superseded": 1} and out["recorded"] == 2
    assert [m[1] for m in messages_of(db, tenant, sid) if not m[2]] == ["list", None, "[cleared]", "next"]
    # the assistant turn itself rewritten: its call id is free again
    out = db.sync_messages(tenant, sid, [{"role": "user", "content": "list"},
                                         {"role": "assistant", "content": "again", "tool_calls": [call]},
                                         {"role": "tool", "tool_call_id": "call_7", "content": "a b"}])
    assert out["rewound"] == {"position": 1, "superseded": 3} and out["recorded"] == 2
    assert [m[1] for m in messages_of(db, tenant, sid) if not m[2]] == ["list", "again", "a b"]
    # and the data is consistent: the superseded turns gave their call ids up (the
    # container's fuzz run flagged them before the check knew rewinds)
    with psycopg.connect(DSN) as conn:
        assert violations(conn, tenant) == {}


def test_an_sdk_message_echoed_back_as_it_came_is_recorded(db, tenant):
    """The OpenAI SDK's ChatCompletionMessage, dumped and resent as clients do, carries
    fields record_message does not take (annotations, audio, function_call) and nulls."""
    sid = db.open_session(tenant, "conv:sdk")
    echoed = {"role": "assistant", "content": None, "refusal": None, "annotations": [], "audio": None,
              "function_call": None, "name": None,
              "tool_calls": [{"id": "call_s", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    out = db.sync_messages(tenant, sid, [{"role": "user", "content": "go"}, echoed])
    assert out["recorded"] == 2
    assert db._call("SELECT tool_calls FROM mnemo.messages WHERE message_id = %(m)s",
                    {"m": out["message_ids"][1]}) == echoed["tool_calls"]


def test_a_message_that_cannot_be_recorded_writes_nothing(db, tenant):
    sid = db.open_session(tenant, "conv:bad")
    with pytest.raises(InvalidMessage):
        db.sync_messages(tenant, sid, [{"role": "user", "content": "ok"}, {"role": "user", "content": 5}])
    assert messages_of(db, tenant, sid) == []
    assert db.sync_messages(tenant, sid, [{"role": "user", "content": "ok"}])["recorded"] == 1


def test_sync_messages_refuses_bad_arguments(db, tenant):
    sid = db.open_session(tenant, "conv:args")
    with pytest.raises(InvalidParameter):
        db._call("SELECT mnemo.sync_messages(%(t)s, %(s)s, '{}'::jsonb)", {"t": tenant, "s": sid})
    with pytest.raises(InvalidParameter):
        db.sync_messages(tenant, sid, [], offset=3)
    with pytest.raises(UnknownSession):
        db.sync_messages(tenant, uuid.uuid4(), [{"role": "user", "content": "x"}])


def test_a_session_started_without_a_key_can_be_synced(db, tenant):
    sid = db.start_session(tenant)
    assert db.sync_messages(tenant, sid, [{"role": "user", "content": "hi"}])["recorded"] == 1
    assert db.sync_messages(tenant, sid, [{"role": "user", "content": "hi"}])["recorded"] == 0


# ------------------------------------------------------------------------ Anthropic
ANTHROPIC_SYSTEM = [{"type": "text", "text": "You are Claude Code."},
                    {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}}]
ANTHROPIC_MESSAGES = [
    {"role": "user", "content": "What is in this picture?"},
    {"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"},
         "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "And this?", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Look at both.", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "abc"},
        {"type": "text", "text": "Let me read the file."},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py", "n": [1, 2]}},
        {"type": "tool_use", "id": "toolu_2", "name": "grep", "input": {}, "cache_control": {"type": "ephemeral"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
         "content": [{"type": "text", "text": "no match"},
                     {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}}]},
        {"type": "text", "text": "Go on."}]},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "s", "cache_control": {"type": "ephemeral"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}}]},
]


def test_anthropic_messages_convert_to_openai_and_back_exactly():
    original = copy.deepcopy(ANTHROPIC_MESSAGES)
    as_openai = af.to_openai(ANTHROPIC_SYSTEM, ANTHROPIC_MESSAGES)
    assert ANTHROPIC_MESSAGES == original  # the input is not changed
    assert as_openai[0] == {"role": "system", "content": "You are Claude Code.\n\nBe careful."}
    assert [m["role"] for m in as_openai[1:]] == [
        "user", "user", "assistant", "tool", "tool", "user", "assistant", "tool", "user"]
    assert as_openai[3]["tool_calls"][0]["function"] == {"name": "read", "arguments": '{"path": "a.py", "n": [1, 2]}'}
    assert as_openai[2]["content"][0] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    system, back = af.to_anthropic(as_openai)
    assert system == ["You are Claude Code.\n\nBe careful."]
    # two user turns in a row are one turn for the Messages API (it merges them too)
    expected = [{"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                             *ANTHROPIC_MESSAGES[1]["content"]]}, *ANTHROPIC_MESSAGES[2:]]
    assert back == expected
    # and the client's own system field goes upstream exactly, the memory after it
    assert af.with_memory_system(ANTHROPIC_SYSTEM, ["Memory: ..."]) == [
        *ANTHROPIC_SYSTEM, {"type": "text", "text": "Memory: ..."}]
    assert af.with_memory_system("Sys", ["Memory: ..."]) == "Sys\n\nMemory: ..."


def test_a_compiled_history_starting_with_the_model_gets_a_user_turn_first():
    system, back = af.to_anthropic([{"role": "system", "content": "Memory: x"},
                                    {"role": "assistant", "content": "Earlier answer."},
                                    {"role": "user", "content": "Go on."}])
    assert system == ["Memory: x"]
    assert [m["role"] for m in back] == ["user", "assistant", "user"]


def test_stop_reasons_map_both_ways():
    for stop, finish in [("end_turn", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"),
                         ("refusal", "content_filter")]:
        assert af.STOP_TO_FINISH[stop] == finish and af.FINISH_TO_STOP[finish] == stop


def test_at_most_four_cache_breakpoints_go_upstream():
    body = {"system": ANTHROPIC_SYSTEM, "messages": [copy.deepcopy(m) for m in ANTHROPIC_MESSAGES * 2]}
    af.limit_cache_breakpoints(body)
    text = json.dumps(body)
    assert text.count("cache_control") == 4
    assert body["system"] == ANTHROPIC_SYSTEM  # the client's own marker stays
    assert "cache_control" in json.dumps(body["messages"][-1])  # the newest ones stay
