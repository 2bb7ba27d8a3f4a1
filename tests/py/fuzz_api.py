"""Fuzzing Mnemosyne's SQL API (issue 20): the strategies and the harness, shared by
tests/py/db/test_fuzz.py (~2k inputs in `make test`) and bench/trust/fuzz.py (>= 100k).

The API is read from the catalog (every routine of schema `mnemo` but the admin ones
in ADMIN), so a new API function cannot be forgotten: `missing_strategies` names any
function without a strategy here. Each strategy draws the arguments of one call, as
{parameter name: value}: mostly plausible calls (so that the data grows and the
consistency checks have something to check), mixed with wrong types, nesting beyond
any limit, huge numbers, unicode, NUL bytes, empty strings and timestamps at and past
the extremes. JSON arguments are drawn as JSON *text*, so nesting deeper than the
client's own json module could write still reaches the server.

`Fuzzer.call` runs one call and classifies its outcome:
  ok        success
  project   an error with a project SQLSTATE (class MN)
  input     refused by PostgreSQL's input of an argument, before the function ran
            (a NUL byte in JSON text: 22P05; no function context)
  finding   anything else: a defect, kept with its input
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from fuzz_values import (
    CHARS,
    JSONText,
    deep,
    deep_json,
    dumps,
    int32,
    int64,
    json_number_text,
    json_object_text,
    json_values,
    junk_text,
    prose,
    some_text,
    timestamps,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

# The application API: what the application role may execute (sql/grants.sql's one
# list), with its input parameters (a TABLE function's columns are not arguments).
API_FUNCTIONS = """
SELECT p.proname::text AS name, (coalesce(p.proargnames, '{}')::text[])[1:p.pronargs] AS args,
    ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) AS t) AS types
FROM pg_proc AS p
WHERE p.pronamespace = 'mnemo'::regnamespace AND p.prokind IN ('f', 'p')
    AND has_function_privilege('mnemo_app', p.oid, 'EXECUTE')
ORDER BY 1
"""


def api_functions(conn: psycopg.Connection) -> dict[str, list[tuple[str, str]]]:
    """{name: [(parameter, type), ...]} of every API function."""
    return {name: list(zip(args, types, strict=True))
            for name, args, types in conn.execute(API_FUNCTIONS).fetchall()}


def missing_strategies(conn: psycopg.Connection) -> list[str]:
    return sorted(set(api_functions(conn)) - set(STRATEGIES))


# --------------------------------------------------------------------------- the pool
@dataclass
class Pool:
    """What the fuzzed calls created, for later calls to refer to: tenants, their
    sessions, tool call ids, messages, memories and artifacts."""
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    tenants: list[str] = field(default_factory=list)
    sessions: dict[str, list[str]] = field(default_factory=dict)
    tool_calls: dict[str, list[str]] = field(default_factory=dict)  # session -> open call ids
    messages: list[int] = field(default_factory=lambda: [1])
    memories: list[int] = field(default_factory=lambda: [1])
    artifacts: list[int] = field(default_factory=lambda: [1])

    @property
    def prefix(self) -> str:
        return f"fz{self.run}_"

    @property
    def like(self) -> str:
        """A LIKE pattern for this run's tenants."""
        return self.prefix.replace("_", "\\_") + "%"


def from_pool(items, junk: st.SearchStrategy, share: int = 9) -> st.SearchStrategy:
    """An element of `items` (a list, or a function returning one, read at draw time)
    `share` times in 10, else a draw of `junk`. The pool grows as calls succeed, yet
    the shape of what is drawn stays the same (Hypothesis requires it): an index into
    the pool is drawn, not an element of a sampled_from built from it."""
    def pick(t):
        chosen = items() if callable(items) else items
        return chosen[t[1] % len(chosen)] if chosen and t[0] < share else t[2]
    return st.tuples(st.integers(0, 9), st.integers(0, 1 << 16), junk).map(pick)


def tenant_of(pool: Pool):
    return from_pool(pool.tenants, st.one_of(st.none(), st.just(""), junk_text, st.just(pool.prefix + "nobody")))


def session_of(pool: Pool, tenant: str | None):
    """Mostly a session of `tenant`, sometimes another tenant's, a random id or NULL."""
    def of_tenant():
        return pool.sessions.get(tenant, [])

    def any_session():
        return [s for ss in pool.sessions.values() for s in ss]
    random_id = st.uuids().map(str)
    return st.integers(0, 19).flatmap(lambda i: from_pool(of_tenant, random_id, 10) if i < 17
                                      else (from_pool(any_session, st.none(), 10), random_id, st.none())[i - 17])


def id_of(items: list[int]):
    return st.one_of(from_pool(items, int64), st.none())


def message_json(pool: Pool, session: str | None) -> st.SearchStrategy:
    """A chat message: mostly valid (user / assistant / system text or content parts,
    an assistant's tool calls, a tool result answering an open call of the session),
    one in eight of any shape."""
    calls = pool.tool_calls.setdefault(str(session), [])
    call = st.fixed_dictionaries({"id": st.one_of(st.uuids().map(lambda u: "call_" + u.hex[:10]), junk_text),
                                  "type": st.just("function"),
                                  "function": st.fixed_dictionaries({
                                      "name": st.one_of(st.sampled_from(["shell", "read_file"]), junk_text),
                                      "arguments": st.one_of(
                                          st.just('{"cmd": "ls"}'), st.just('{"path": "/etc/hosts"}'),
                                          junk_text, st.just(deep(1200)), st.just("[" * 900 + "]" * 900))})})
    content = st.one_of(prose, prose, some_text, st.lists(st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": some_text}),
        st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries({
            "url": st.just("https://example.com/x.png")})})), min_size=1, max_size=3))
    plain = st.fixed_dictionaries({"role": st.sampled_from(["user", "user", "assistant", "system", "developer"]),
                                   "content": content},
                                  optional={"name": st.sampled_from(["bob", "ada", "bob_ghp_x"])})
    assistant_calls = st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(),
                                             "tool_calls": st.lists(call, min_size=1, max_size=3)})
    tool = st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": from_pool(calls, junk_text),
                                  "content": st.one_of(prose, some_text, st.just("x" * 70_000))})
    odd = st.one_of(json_values, st.fixed_dictionaries({"role": some_text, "content": json_values}),
                    st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "refusal",
                                                     "name", "colour"]), json_values, max_size=5),
                    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]),
                                           "content": json_values, "tool_calls": json_values,
                                           "tool_call_id": json_values, "name": json_values}))
    return st.one_of(plain, plain, plain, assistant_calls, assistant_calls, tool, tool, odd).map(dumps)


METADATA = {"model": st.sampled_from(["gpt-4o", ""]), "finish_reason": st.just("stop"),
            "prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**6),
            "latency_ms": st.integers(0, 10**5), "note": json_values}
# An ordinary timestamp (most calls), or one at or past the extremes.
created_at = st.one_of(st.none(), st.none(), st.none(), st.none(), st.none(),
                       st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1))
                       .map(lambda d: d.isoformat() + "+00"), timestamps)
SENSITIVITY = st.sampled_from(["none", "none", "none", "low", "high", "secret"])
TAGS = st.lists(st.text(CHARS, max_size=10), max_size=4)


# --------------------------------------------------------------------------- strategies
# name -> f(pool) -> strategy of {parameter: value}, mostly plausible: Fuzzer.strategy
# then replaces one argument in three with a wild value of its SQL type (WILD).
# Parameters left out take their defaults.
def _record_message(pool: Pool):
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        s = draw(session_of(pool, t))
        return {"p_tenant_id": t, "p_session_id": s, "p_message": draw(message_json(pool, s)),
                "p_sensitivity": draw(SENSITIVITY), "p_tags": draw(TAGS), "p_created_at": draw(created_at),
                "p_metadata": draw(json_object_text(METADATA))}
    return build()


def _record_messages(pool: Pool):
    """A batch of 0-4 messages (a turn, an importer's batch), with created_at and
    metadata one per message, absent, or of the wrong length."""
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        s = draw(session_of(pool, t))
        messages = draw(st.lists(message_json(pool, s), max_size=4))
        n = len(messages)

        def per_message(each):
            return st.one_of(st.none(), st.lists(each, min_size=n, max_size=n),
                             st.lists(each, min_size=n, max_size=n), st.lists(each, max_size=3))
        return {"p_tenant_id": t, "p_session_id": s, "p_messages": messages,
                "p_sensitivity": draw(SENSITIVITY), "p_tags": draw(TAGS),
                "p_created_at": draw(per_message(created_at)),
                "p_metadata": draw(per_message(json_object_text(METADATA)))}
    return build()


EVENT_CONTENT = {  # kind -> (fields, required fields)
    "message": ({"text": some_text}, ("text",)),
    "tool_call": ({"tool": st.sampled_from(["shell", "grep"]), "arguments": json_values, "id": junk_text},
                  ("tool",)),
    "tool_result": ({"tool": st.sampled_from(["shell", "grep"]), "text": some_text, "excerpt_text": some_text,
                     "tool_call_id": junk_text, "exit_code": st.integers()}, ("tool", "text")),
    "decision": ({"decision": prose, "rationale": st.lists(some_text, max_size=3),
                  "alternatives": st.lists(some_text, max_size=3), "constraints": st.lists(prose, max_size=2),
                  "consequences": st.lists(json_values, max_size=2)}, ("decision",)),
    "task_update": ({"title": prose, "status": st.sampled_from(["open", "doing", "done", "dropped"]),
                     "due_at": created_at}, ("title",)),
    "artifact": ({"text": some_text, "base64": st.one_of(st.just("aGVsbG8="), junk_text),
                  "media_type": junk_text, "meta": json_values}, ("text",)),
}


def _record_event(pool: Pool):
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        kind = draw(st.sampled_from(sorted(EVENT_CONTENT)))
        fields, required = EVENT_CONTENT[kind]
        return {"p_tenant_id": t, "p_session_id": draw(session_of(pool, t)), "p_kind": kind,
                "p_content": draw(json_object_text(fields, required)),
                "p_actor": draw(json_object_text({"type": st.sampled_from(["human", "agent", "system", "x"]),
                                                  "id": junk_text})),
                "p_sensitivity": draw(SENSITIVITY), "p_tags": draw(TAGS), "p_refs": draw(TAGS),
                "p_created_at": draw(created_at)}
    return build()


KINDS = ["fact", "preference", "instruction", "decision", "task", "open_loop", "note", "plan", "file_context",
         "tool_result", "error_context", "external_reference"]


def _remember(pool: Pool):
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        options = json_object_text({
            "fact": st.fixed_dictionaries({"subject": st.sampled_from(["user", "Bob"]),
                                           "predicate": st.sampled_from(["lives_in", "likes"]),
                                           "object": prose}, optional={"functional": st.booleans()}),
            "scope": st.sampled_from(["local", "global"]), "confidence": st.floats(0, 1),
            "tags": TAGS, "sensitivity": SENSITIVITY, "entities": st.lists(prose, max_size=3),
            "rationale": st.lists(some_text, max_size=2), "alternatives": st.lists(prose, max_size=2),
            "due_at": created_at, "source_message_ids": st.lists(from_pool(pool.messages, int64), max_size=3),
            "pinned": st.booleans(), "provenance_type": st.sampled_from(["user_stated", "fact", "correction"])})
        return {"p_tenant_id": t, "p_content": draw(st.one_of(prose, prose, prose, some_text)),
                "p_kind": draw(st.sampled_from(KINDS)), "p_session_id": draw(st.one_of(st.none(), session_of(pool, t))),
                "p_options": draw(options)}
    return build()


def _correct(pool: Pool):
    return st.fixed_dictionaries({"p_tenant_id": tenant_of(pool), "p_memory_id": id_of(pool.memories),
                                  "p_content": st.one_of(prose, some_text),
                                  "p_reason": st.one_of(some_text, st.none())})


def _forget(pool: Pool):
    return st.fixed_dictionaries({"p_tenant_id": tenant_of(pool), "p_memory_id": id_of(pool.memories),
                                  "p_filter": json_object_text({
                                      "memory_ids": st.lists(from_pool(pool.memories, int64), max_size=3),
                                      "kind": st.sampled_from(KINDS), "session_id": st.uuids().map(str),
                                      "tags": TAGS, "contains": some_text, "source_key": junk_text,
                                      "entity": some_text,
                                      "source_message_ids": st.lists(from_pool(pool.messages, int64), max_size=2),
                                      "created_before": created_at, "created_after": created_at,
                                      "all": st.booleans()})})


def _query_decisions(pool: Pool):
    return st.fixed_dictionaries({"p_tenant_id": tenant_of(pool),
                                  "p_query": st.one_of(prose, some_text, st.none(), st.just("the of a")),
                                  "p_options": json_object_text({
                                      "limit": st.integers(1, 200), "include_superseded": st.booleans(),
                                      "session_id": st.uuids().map(str)})})


def _get_artifact(pool: Pool):
    return st.fixed_dictionaries({"p_tenant_id": tenant_of(pool), "p_artifact_id": id_of(pool.artifacts)})


COMPILE_OPTIONS = {"budget": st.integers(0, 20_000),
                   "task_type": st.sampled_from(["continuation", "knowledge", "new_session", "tool_heavy"]),
                   "channel": st.sampled_from(["private", "team", "public", "agent"]),
                   "caps": st.fixed_dictionaries({}, optional={"memory": st.integers(0, 5000),
                                                               "history": st.integers(0, 5000),
                                                               "items": st.integers(0, 50)}),
                   "as_of": created_at, "phantom_tools": st.booleans(), "tool_tokens": st.integers(0, 10**4),
                   "log": st.booleans(), "max_items": st.integers(0, 100)}


# A query of megabytes: it once held a backend for 12.7 s (issue 46); the compile
# searches on its first characters.
HUGE_QUERY = "where did I park the car after the concert, and who drove? " * 20_000


def _compile(pool: Pool):
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        return {"p_tenant_id": t, "p_session_id": draw(session_of(pool, t)),
                "p_query": draw(st.one_of(prose, some_text, st.none(),
                                          st.sampled_from(["the of a", "what is it?", HUGE_QUERY]))),
                "p_options": draw(json_object_text(COMPILE_OPTIONS))}
    return build()


def some_of(draw, args: dict, optional) -> dict:
    """args with each (name, strategy) of optional drawn one time in three (the
    function's default the other two)."""
    for name, strat in optional:
        if draw(st.integers(0, 2)) == 0:
            args[name] = draw(strat)
    return args


def _start_session(pool: Pool):
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        return some_of(draw, {"p_tenant_id": t}, (
            ("p_agent_id", st.sampled_from(["coder", "bob_ghp_x", "ü"])),
            ("p_channel", st.sampled_from(["private", "team", "public", "agent"])),
            ("p_model", st.sampled_from(["gpt-4o", "tiny"])),
            ("p_context_window", st.sampled_from([8192, 128000, 256, 10_000_000])),
            ("p_response_reserve", st.sampled_from([0, 100, 4096])),
            ("p_system_prompt", st.one_of(prose, some_text)),
            ("p_config", json_object_text({"x": json_values})),
            ("p_session_id", st.one_of(st.uuids().map(str), session_of(pool, t))),
            ("p_parent_session_id", session_of(pool, t)),
            ("p_metadata", json_object_text({"x": json_values, "y": some_text}))))
    return build()


def _open_session(pool: Pool):
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        return some_of(draw, {"p_tenant_id": t, "p_session_key": draw(st.one_of(
            st.sampled_from(["conv:a", "conv:b", "x" * 513]), some_text, session_of(pool, t)))}, (
            ("p_agent_id", st.sampled_from(["proxy", "ü", ""])),
            ("p_channel", st.sampled_from(["private", "team", "nope"])),
            ("p_model", st.sampled_from(["gpt-4o", "claude-x", ""])),
            ("p_context_window", st.sampled_from([8192, 200000, 100])),
            ("p_response_reserve", st.sampled_from([0, 4096, 10**6])),
            ("p_system_prompt", st.one_of(prose, some_text, st.none())),
            ("p_metadata", json_object_text({"x": json_values}))))
    return build()


def _sync_messages(pool: Pool):
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        s = draw(session_of(pool, t))
        messages = draw(st.lists(message_json(pool, s), max_size=4))
        return {"p_tenant_id": t, "p_session_id": s, "p_messages": JSONText("[" + ", ".join(messages) + "]"),
                "p_offset": draw(st.sampled_from([0, 0, 0, 1, 3])),
                "p_metadata": draw(json_object_text(METADATA))}
    return build()


def _create_tenant(pool: Pool):
    return st.fixed_dictionaries({
        "p_tenant_id": st.text("abcxyz019_.:@-", min_size=1, max_size=12).map(lambda s: pool.prefix + s),
        "p_display_name": st.one_of(some_text, st.none()),
        "p_config": json_object_text({"redaction": st.fixed_dictionaries({"enabled": st.booleans()}),
                                      "scoring": json_values, "formation": json_values})})


def _list_sessions(pool: Pool):
    return st.fixed_dictionaries({"p_tenant_id": tenant_of(pool), "p_options": json_object_text({
        "status": st.sampled_from(["active", "paused", "closed", "expired", "x"]), "agent_id": some_text,
        "limit": st.integers(-5, 10**6)})})


def _search(pool: Pool):
    return st.fixed_dictionaries({"p_tenant_id": tenant_of(pool),
                                  "p_query": st.one_of(prose, some_text, st.none(), st.just("the of a")),
                                  "p_options": json_object_text({"limit": st.integers(-5, 10**6),
                                                                 "session_id": st.uuids().map(str),
                                                                 "kinds": st.lists(some_text, max_size=3)})})


def _memory_stats(pool: Pool):
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        return {"p_tenant_id": t, "p_session_id": draw(st.one_of(st.none(), session_of(pool, t)))}
    return build()


def _build_acb(pool: Pool):
    @st.composite
    def build(draw):
        t = draw(tenant_of(pool))
        return {"p_tenant_id": t, "p_session_id": draw(session_of(pool, t)),
                "p_query_text": draw(st.one_of(prose, some_text, st.none())),
                "p_max_tokens": draw(st.one_of(st.none(), st.integers(-10, 50_000))),
                "p_channel": draw(st.one_of(st.none(), st.sampled_from(["private", "team", "public", "x"]))),
                "p_intent": draw(st.one_of(st.none(), some_text)),
                "p_agent_id": draw(st.one_of(st.none(), some_text)),
                "p_options": draw(json_object_text(COMPILE_OPTIONS))}
    return build()


def object_ref(pool: Pool) -> st.SearchStrategy:
    """A paging id: obj:N / msg:N / mem:N of the pool's messages and memories (an
    object's own id is drawn as a number), or junk."""
    return st.one_of(
        st.tuples(st.sampled_from(["obj", "msg", "mem"]), from_pool(pool.messages, int64)).map("{0[0]}:{0[1]}".format),
        from_pool(pool.memories, int64).map("mem:{}".format), some_text, st.none())


def _paging(extra):
    """A phantom tool's or paging function's arguments: a tenant, one of its sessions,
    and `extra` (name -> strategy of the pool)."""
    def strategy(pool: Pool):
        @st.composite
        def build(draw):
            t = draw(tenant_of(pool))
            return {"p_tenant_id": t, "p_session_id": draw(session_of(pool, t)),
                    **{k: draw(v(pool)) for k, v in extra.items()}}
        return build()
    return strategy


PHANTOM_CALL = {"name": st.sampled_from(["memory_query", "memory_restore", "memory_release", "memory_forget", ""]),
                "arguments": st.one_of(json_values.map(json.dumps), some_text)}


def _text_arg(name):
    return lambda pool: st.fixed_dictionaries({name: st.one_of(prose, some_text)})


STRATEGIES = {
    "record_message": _record_message,
    "record_messages": _record_messages,
    "record_event": _record_event,
    "remember": _remember,
    "correct": _correct,
    "forget": _forget,
    "query_decisions": _query_decisions,
    "get_artifact": _get_artifact,
    "compile_context": _compile,
    "compile_context_bundle": _compile,
    "start_session": _start_session,
    "open_session": _open_session,
    "sync_messages": _sync_messages,
    "create_tenant": _create_tenant,
    "build_acb": _build_acb,
    "list_sessions": _list_sessions,
    "search": _search,
    "export_tenant": lambda pool: st.fixed_dictionaries({"p_tenant_id": tenant_of(pool)}),
    "memory_stats": _memory_stats,
    "memory_query": _paging({"p_question": lambda pool: st.one_of(prose, some_text, st.none()),
                             "p_scope": lambda pool: st.one_of(st.none(), object_ref(pool)),
                             "p_max_tokens": lambda pool: st.one_of(st.none(), st.integers(-10, 5000))}),
    "memory_restore": _paging({"p_id": object_ref, "p_reason": lambda pool: st.one_of(st.none(), some_text)}),
    "memory_release": _paging({"p_ids": lambda pool: st.one_of(st.lists(object_ref(pool), max_size=4), st.none()),
                               "p_reason": lambda pool: st.one_of(st.none(), some_text)}),
    "memory_objects": _paging({"p_limit": lambda pool: st.one_of(st.none(), st.integers(-5, 5000))}),
    "handle_tool_call": _paging({"p_tool_call": lambda pool: st.one_of(
        json_object_text({"id": some_text, "type": st.just("function"),
                          "function": st.fixed_dictionaries(PHANTOM_CALL)}), json_values.map(dumps))}),
    "paging_metrics": _paging({"p_since": lambda pool: st.one_of(st.none(), timestamps),
                               "p_until": lambda pool: st.one_of(st.none(), timestamps)}),
    "create_api_key": lambda pool: st.fixed_dictionaries({
        "p_tenant_id": tenant_of(pool), "p_label": st.one_of(st.none(), some_text, st.just("x" * 201)),
        "p_expires_at": st.one_of(st.none(), timestamps)}),
    "list_api_keys": lambda pool: st.fixed_dictionaries({"p_tenant_id": tenant_of(pool)}),
    "revoke_api_key": lambda pool: st.fixed_dictionaries({
        "p_tenant_id": tenant_of(pool), "p_key_id": st.one_of(st.none(), some_text, st.just("0123456789ab"))}),
    "count_tokens": _text_arg("p_text"),
    "embed": _text_arg("p_text"),
    "embed_batch": lambda pool: st.fixed_dictionaries({"p_texts": st.lists(st.one_of(prose, some_text),
                                                                           max_size=5)}),
}
# How often each is drawn: the write paths most, so that the data grows.
WEIGHTS = {"record_message": 6, "record_messages": 3, "record_event": 3, "sync_messages": 2, "remember": 3, "start_session": 2, "compile_context": 2,
           "compile_context_bundle": 1, "correct": 1, "forget": 1, "query_decisions": 1, "get_artifact": 1,
           "create_tenant": 1, "count_tokens": 1, "embed": 1, "embed_batch": 1}


def wild(pool: Pool, sql_type: str) -> st.SearchStrategy:
    """Any value of a SQL type, as the API may be called with it: NULL, empty, wrong
    shapes, extremes, NUL bytes (which PostgreSQL's input refuses before the call)."""
    if sql_type == "jsonb":
        return st.one_of(json_values.map(dumps), deep_json, json_number_text.map(JSONText), st.none(),
                         st.just(JSONText('"\\u0000"')), st.just(JSONText('{"a\\u0000": 1}')))
    if sql_type == "jsonb[]":  # a list of JSON values, with NULLs, or two-dimensional
        return st.one_of(st.none(), st.just([]), st.lists(st.one_of(json_values.map(dumps), st.none()), max_size=3),
                         st.just([[dumps({"role": "user", "content": "hi"})]]))
    if sql_type == "timestamp with time zone[]":
        return st.one_of(st.none(), st.lists(st.one_of(timestamps, st.none()), max_size=3))
    if sql_type == "text[]":
        return st.one_of(st.lists(st.one_of(some_text, st.none()), max_size=4), st.just([None]), st.none(),
                         st.just(["a\x00b"]))
    if sql_type == "uuid":
        return st.one_of(st.uuids().map(str), st.none(), from_pool(lambda: [s for ss in pool.sessions.values()
                                                                            for s in ss], st.none()))
    if sql_type == "timestamp with time zone":
        return st.one_of(timestamps, st.none())
    if sql_type == "integer":
        return st.one_of(int32, st.none())
    if sql_type == "bigint":
        return st.one_of(int64, st.none())
    return st.one_of(some_text, st.none(), st.just(""), st.text(max_size=6))  # text (may hold NUL)


# --------------------------------------------------------------------------- harness
@dataclass
class Finding:
    function: str
    sqlstate: str | None
    message: str
    args: dict


class Fuzzer:
    """Runs fuzzed calls on one autocommit connection and keeps the pool and the
    figures: calls and outcomes per function, and the findings (non-project errors)."""

    def __init__(self, conn: psycopg.Connection, tenants: int = 3, sessions: int = 3):
        self.conn = conn
        self.dsn = conn.info.dsn
        # a call that runs away is a finding too (57014), not a hung run
        conn.execute("SET statement_timeout = '120s'")
        self.api = api_functions(conn)
        self.pool = Pool()
        self.counts: dict[str, Counter] = {name: Counter() for name in self.api}
        self.findings: list[Finding] = []
        self.refusals: Counter = Counter()  # (function, sqlstate, message's start)
        self.seconds: Counter = Counter()  # time spent in each function's calls
        self.durations: dict[str, list[float]] = {}  # each call's seconds, by function
        for i in range(tenants):
            t = f"{self.pool.prefix}{i}"
            conn.execute("SELECT mnemo.create_tenant(%s)", (t,))
            self.pool.tenants.append(t)
            for _ in range(sessions):
                sid = conn.execute("SELECT mnemo.start_session(%s, p_context_window => 8192)", (t,)).fetchone()[0]
                self.pool.sessions.setdefault(t, []).append(str(sid))
        self.names = [name for name in sorted(self.api) for _ in range(WEIGHTS.get(name, 1))]

    def strategy(self, name: str) -> st.SearchStrategy:
        """The arguments of one call of `name`: its strategy's, with one argument in
        four replaced by a wild value of its type."""
        params = self.api[name]

        @st.composite
        def build(draw):
            args = draw(STRATEGIES[name](self.pool))
            if params and draw(st.integers(0, 3)) == 0:
                param, sql_type = draw(st.sampled_from(params))
                args[param] = draw(wild(self.pool, sql_type))
            return args
        return build()

    def sql(self, name: str, args: dict) -> tuple[str, list]:
        types = dict(self.api[name])
        unknown = set(args) - set(types)
        assert not unknown, f"strategy for {name} draws unknown parameters {unknown}"
        parts, params = [], []
        for k, v in args.items():
            parts.append(f"{k} => %s::{types[k]}")
            params.append(v)
        return f"SELECT mnemo.{name}({', '.join(parts)})", params

    def call(self, name: str, args: dict) -> str:
        query, params = self.sql(name, args)
        started = time.monotonic()
        try:
            row = self.conn.execute(query, params).fetchone()
            result = row[0] if row else None  # a set-returning function may return no row
        except psycopg.OperationalError as e:
            # the connection is gone (a crashed backend): a finding; go on with a new one
            self.findings.append(Finding(name, e.sqlstate, str(e)[:300], args))
            outcome = "finding"
            if self.conn.closed:
                self.conn = psycopg.connect(self.dsn, autocommit=True)
                self.conn.execute("SET statement_timeout = '120s'")
        except psycopg.DataError as e:
            if e.sqlstate is None:  # the driver refused a value (a NUL byte in text)
                outcome = "input"
            else:
                outcome = self._classify(name, args, e)
        except psycopg.Error as e:
            outcome = self._classify(name, args, e)
        else:
            outcome = "ok"
            self._remember_result(name, args, result)
        self.counts[name][outcome] += 1
        elapsed = time.monotonic() - started
        self.seconds[name] += elapsed
        self.durations.setdefault(name, []).append(elapsed)
        return outcome

    def _classify(self, name: str, args: dict, e: psycopg.Error) -> str:
        state = e.sqlstate or ""
        if state.startswith("MN"):
            if e.diag.message_primary and e.diag.message_primary.startswith("plpy."):
                self.findings.append(Finding(name, state, "PL/Python prefix: " + e.diag.message_primary, args))
                return "finding"
            self.refusals[(name, state, (e.diag.message_primary or "")[:40])] += 1
            return "project"
        if state.startswith("22") and "PL/" not in (e.diag.context or ""):
            # an argument's input function refused it (a NUL byte in JSON text),
            # before the function ran: not the function's outcome
            return "input"
        self.findings.append(Finding(name, state, (e.diag.message_primary or str(e))[:300], args))
        return "finding"

    def _remember_result(self, name: str, args: dict, result) -> None:
        pool, t = self.pool, args.get("p_tenant_id")
        if name == "create_tenant" and isinstance(result, str) and result.startswith(pool.prefix) \
                and result not in pool.tenants:
            pool.tenants.append(result)
        elif name in ("start_session", "open_session") and t in pool.tenants:
            sessions = pool.sessions.setdefault(t, [])
            if str(result) not in sessions:
                sessions.append(str(result))
        elif name in ("record_message", "record_messages"):
            single = name == "record_message"
            pool.messages.extend([result] if single else result)
            for text in [args["p_message"]] if single else args["p_messages"]:
                message = json.loads(text)
                for c in message.get("tool_calls") or []:
                    pool.tool_calls.setdefault(str(args["p_session_id"]), []).append(c["id"])
                if message.get("role") == "tool":
                    open_calls = pool.tool_calls.get(str(args["p_session_id"]), [])
                    if message.get("tool_call_id") in open_calls:
                        open_calls.remove(message["tool_call_id"])
        elif name in ("remember", "correct") and result is not None:
            pool.memories.append(result)
        elif name == "record_event" and isinstance(result, dict):
            if result.get("memory_id"):
                pool.memories.append(result["memory_id"])
            if result.get("artifact_id"):
                pool.artifacts.append(result["artifact_id"])
            if result.get("message_id"):
                pool.messages.append(result["message_id"])
            if args.get("p_kind") == "tool_call" and result.get("tool_call_id"):
                pool.tool_calls.setdefault(str(args["p_session_id"]), []).append(result["tool_call_id"])

    def drop_queued_jobs(self) -> int:
        """Deletes the fuzzed tenants' queued jobs (after the consistency checks): a
        backlog of a few hundred embed and extract jobs would otherwise be worked off
        by whatever runs the job runner next (later tests, the load part of
        bench-trust) and distort it."""
        return self.conn.execute("DELETE FROM mnemo.jobs WHERE tenant_id LIKE %s AND status = 'queued'",
                                 (self.pool.like,)).rowcount

    def figures(self) -> dict:
        total = Counter()
        for c in self.counts.values():
            total.update(c)
        return {"inputs": sum(total.values()), "outcomes": dict(total),
                "per_function": {k: dict(v) for k, v in sorted(self.counts.items())},
                "mean_ms": {k: round(1000 * self.seconds[k] / max(sum(v.values()), 1), 1)
                            for k, v in sorted(self.counts.items())},
                "findings": len(self.findings)}


def drive(fuzzer: Fuzzer, examples: int) -> None:
    """Draws `examples` calls with Hypothesis (a function, then its arguments) and runs
    each through `fuzzer`. Outcomes are collected, never raised: one run reports every
    finding, not the first."""
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def one(data):
        name = data.draw(st.sampled_from(fuzzer.names), label="function")
        fuzzer.call(name, data.draw(fuzzer.strategy(name), label="arguments"))
    one()
