"""The transparent proxy (`mnemo serve`, issue 23) driven by the official OpenAI and
Anthropic SDKs, streamed and not, against a scripted provider that is a real HTTP
server (mnemosyne.proxy.scripted) and the real database."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid

import anthropic
import httpx2
import openai
import psycopg
import pytest
from conftest import DSN

from mnemosyne.proxy import Config, create_app
from mnemosyne.proxy.scripted import Reply, ScriptedUpstream, ServerThread

PROVIDER_KEY = "sk-provider-" + uuid.uuid4().hex[:8]


# ------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def upstream():
    up = ScriptedUpstream()
    server = ServerThread(up.app).start()
    up.url = server.url
    yield up
    server.stop()


@pytest.fixture(scope="module")
def keyed_tenant():
    tid = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("SELECT mnemo.create_tenant(%s)", (tid,))
    return tid


@pytest.fixture(scope="module")
def proxy_key(keyed_tenant):
    """An API key of keyed_tenant (mnemo.create_api_key)."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        return conn.execute("SELECT mnemo.create_api_key(%s, 'test_proxy') ->> 'secret'", (keyed_tenant,)).fetchone()[0]


def start_proxy(upstream_url: str, dsn: str = DSN, **kw) -> ServerThread:
    """The proxy, in trusted-gateway mode unless told otherwise: most tests here name
    their tenant with X-Mnemo-Tenant (test_edge.py tests the modes themselves)."""
    kw.setdefault("mode", "gateway")
    config = Config(dsn=dsn, openai_base_url=upstream_url + "/v1", anthropic_base_url=upstream_url,
                    db_timeout=1.0, **kw)
    return ServerThread(create_app(config)).start()


@pytest.fixture(scope="module")
def proxy(upstream, keyed_tenant):
    server = start_proxy(upstream.url, openai_api_key=PROVIDER_KEY, anthropic_api_key=PROVIDER_KEY)
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def fresh_script(upstream):
    upstream.script.clear()
    upstream.requests.clear()
    upstream.default = Reply(text="Scripted answer.")


@pytest.fixture()
def oai(proxy, tenant):
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0,
                         default_headers={"X-Mnemo-Tenant": tenant})


@pytest.fixture()
def ant(proxy, tenant):
    return anthropic.Anthropic(base_url=proxy.url, api_key="sk-client", max_retries=0,
                               default_headers={"X-Mnemo-Tenant": tenant})


@pytest.fixture()
def phantom(db):
    if not db._call("SELECT to_regprocedure('mnemo.handle_tool_call(text, uuid, jsonb)') IS NOT NULL", {}):
        pytest.skip("mnemo.handle_tool_call (the paging issue's phantom tool handler) is not deployed")


def session_messages(db, tenant: str, session_id: str, *, active_only: bool = False) -> list[dict]:
    rows = db._rows("SELECT role, content, tool_calls, tool_call_id, is_compacted, metadata, artifact_id"
                    " FROM mnemo.messages WHERE tenant_id = %(t)s AND session_id = %(s)s"
                    " ORDER BY turn_index", {"t": tenant, "s": session_id})
    return [r for r in rows if not (active_only and r["is_compacted"])]


def wait_messages(db, tenant: str, session_id: str, count: int) -> list[dict]:
    """The session's messages once there are `count` (the reply is recorded after the
    response has ended)."""
    for _ in range(200):
        rows = session_messages(db, tenant, session_id)
        if len(rows) >= count:
            return rows
        time.sleep(0.05)
    raise AssertionError(f"{len(rows)} messages recorded, expected {count}: {rows}")


def openai_text(stream) -> tuple[str, str | None]:
    text, finish = "", None
    for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, finish


SYSTEM = "You are a careful coding agent."


# ------------------------------------------------------------------------ text replies
@pytest.mark.parametrize("stream", [False, True])
def test_openai_text_reply_is_recorded_and_the_context_compiled(db, tenant, oai, upstream, stream):
    upstream.push(Reply(text="Paris is the capital of France.", usage=(30, 8)))
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Capital of France?"}]
    raw = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages, stream=stream)
    if stream:
        text, finish = openai_text(raw.parse())
    else:
        completion = raw.parse()
        text, finish = completion.choices[0].message.content, completion.choices[0].finish_reason
    assert (text, finish) == ("Paris is the capital of France.", "stop")
    assert raw.headers["x-mnemo-status"] == "managed"
    sid = raw.headers["x-mnemo-session"]
    rows = wait_messages(db, tenant, sid, 2)
    assert [(r["role"], r["content"]) for r in rows] == [
        ("user", "Capital of France?"), ("assistant", "Paris is the capital of France.")]
    assert rows[1]["metadata"]["prompt_tokens"] == 30 and rows[1]["metadata"]["completion_tokens"] == 8
    assert rows[1]["metadata"]["finish_reason"] == "stop"
    sent = upstream.requests[-1]
    # the client's own system prompt goes first, exactly; then the compiled history
    assert sent["messages"][0] == {"role": "system", "content": SYSTEM}
    assert sent["messages"][-1] == {"role": "user", "content": "Capital of France?"}
    session = db._rows("SELECT model, context_window FROM mnemo.sessions WHERE session_id = %(s)s", {"s": sid})
    assert session == [{"model": "gpt-4o", "context_window": 128000}]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_text_reply_with_thinking_is_recorded(db, tenant, ant, upstream, stream):
    upstream.push(Reply(text="It parses logs.", thinking="The README says so."))
    kwargs = {"model": "claude-scripted-1", "max_tokens": 1000, "extra_query": {"beta": "true"},
              "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
              "messages": [{"role": "user", "content": "What does this repo do?"}]}
    if stream:
        with ant.messages.stream(**kwargs) as s:
            message = s.get_final_message()
        sid = s.response.headers["x-mnemo-session"]
    else:
        raw = ant.messages.with_raw_response.create(**kwargs)
        message, sid = raw.parse(), raw.headers["x-mnemo-session"]
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[1].text == "It parses logs." and message.stop_reason == "end_turn"
    assert message.content[0].signature.startswith("sig-")
    rows = wait_messages(db, tenant, sid, 2)
    assert rows[0]["content"] == "What does this repo do?"
    assert rows[1]["role"] == "assistant" and rows[1]["content"] == "It parses logs."
    assert rows[1]["metadata"]["stop_reason"] == "end_turn"
    sent = upstream.requests[-1]
    # the client's system blocks, exactly (cache_control kept)
    assert sent["system"][0] == kwargs["system"][0]
    assert sent["messages"][-1]["content"] == "What does this repo do?"
    assert upstream.last_query == "beta=true"  # Claude Code's ?beta=true goes upstream


# ------------------------------------------------------------------------ the write path
def test_a_resent_history_records_nothing_twice(db, tenant, oai, upstream):
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name three primes."}]
    sid = None
    for turn in range(3):
        upstream.push(Reply(text=f"Answer {turn}."))
        raw = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, stream=True)
        text, _ = openai_text(raw.parse())
        assert sid in (None, raw.headers["x-mnemo-session"])  # one conversation, one session
        sid = raw.headers["x-mnemo-session"]
        wait_messages(db, tenant, sid, 2 * turn + 2)
        history += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And {turn}?"}]
    history.pop()
    # the same history again, and the same answer: nothing new
    upstream.push(Reply(text="Answer 2."))
    history_again = history[:-1]
    openai_text(oai.chat.completions.create(model="gpt-4o", messages=history_again, stream=True))
    time.sleep(0.5)
    rows = session_messages(db, tenant, sid)
    assert [r["content"] for r in rows] == ["Name three primes.", "Answer 0.", "And 0?", "Answer 1.",
                                            "And 1?", "Answer 2."]
    assert not any(r["is_compacted"] for r in rows)


def test_the_new_history_and_the_compile_commit_together(db, tenant, oai, upstream):
    """The proxy opens the session, records what is new and compiles in one
    transaction (one commit, one WAL flush, where each call's commit flushed it): while
    the compile waits (here for a lock on context_log, which it writes), the message
    just synced is not yet visible to anyone else; once the request ends it is."""
    upstream.push(Reply(text="Done."))
    probe = f"Lock probe {uuid.uuid4().hex[:8]}: what changed?"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": probe}]

    def recorded() -> int:
        return db._call("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %(t)s AND content = %(c)s",
                        {"t": tenant, "c": probe})

    done: dict = {}
    with psycopg.connect(DSN) as blocker:  # a transaction of its own until rollback
        blocker.execute("LOCK TABLE mnemo.context_log IN EXCLUSIVE MODE")
        worker = threading.Thread(target=lambda: done.setdefault("reply", openai_text(
            oai.chat.completions.create(model="gpt-4o", messages=messages, stream=True))))
        worker.start()
        try:
            for _ in range(1200):  # up to a minute on a busy machine
                if db._call("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND query LIKE '%%compile_context_bundle%%'", {}):
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("the compile never waited for the lock")
            assert recorded() == 0  # synced, not committed: the compile's transaction holds it
        finally:
            blocker.rollback()
        worker.join(60)
    assert done["reply"] == ("Done.", "stop")
    assert recorded() == 1


def test_an_edited_history_supersedes_the_old_branch(db, tenant, oai, upstream):
    history = [{"role": "user", "content": "Plan the migration."}]
    raw = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
    sid = raw.headers["x-mnemo-session"]
    history += [{"role": "assistant", "content": raw.parse().choices[0].message.content},
                {"role": "user", "content": "Use blue-green deployment."}]
    oai.chat.completions.create(model="gpt-4o", messages=history)
    wait_messages(db, tenant, sid, 4)
    # the user rewinds and edits their second message
    history[-1] = {"role": "user", "content": "Use a rolling deployment."}
    oai.chat.completions.create(model="gpt-4o", messages=history)
    rows = wait_messages(db, tenant, sid, 6)
    active = [r["content"] for r in rows if not r["is_compacted"]]
    assert active == ["Plan the migration.", "Scripted answer.", "Use a rolling deployment.", "Scripted answer."]
    assert [r["content"] for r in rows if r["is_compacted"]] == ["Use blue-green deployment.", "Scripted answer."]
    rewinds = db._call("SELECT rewinds FROM mnemo.transcripts WHERE session_id = %(s)s", {"s": sid})
    assert [(r["position"], r["superseded"]) for r in rewinds] == [(2, 2)]
    history_sent = [m for m in upstream.requests[-1]["messages"] if m["role"] != "system"]
    assert "Use blue-green deployment." not in json.dumps(history_sent)


@pytest.mark.parametrize("stream", [False, True])
def test_streamed_client_tool_calls_pass_through(db, tenant, oai, upstream, stream):
    args = {"path": "src/main.py", "lines": [1, 40]}
    upstream.push(Reply(text="Reading it.", tool_calls=[("call_read_1", "read_file", args)]))
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "Open main."}]
    raw = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages, tools=tools,
                                                        stream=stream)
    if stream:
        calls: dict[int, dict] = {}
        finish = None
        for chunk in raw.parse():
            for c in chunk.choices:
                finish = c.finish_reason or finish
                for d in c.delta.tool_calls or []:
                    st = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                    st["id"] = d.id or st["id"]
                    st["name"] += d.function.name or ""
                    st["arguments"] += d.function.arguments or ""
        got = [calls[i] for i in sorted(calls)]
    else:
        choice = raw.parse().choices[0]
        finish = choice.finish_reason
        got = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
               for c in choice.message.tool_calls]
    assert finish == "tool_calls"
    assert [(c["id"], c["name"], json.loads(c["arguments"])) for c in got] == [("call_read_1", "read_file", args)]
    sid = raw.headers["x-mnemo-session"]
    rows = wait_messages(db, tenant, sid, 2)
    assert rows[1]["tool_calls"][0]["id"] == "call_read_1"
    # the client's own tools went upstream, unchanged
    assert upstream.requests[-1]["tools"][0] == tools[0]
    # the tool result in the next call is recorded against the call
    messages += [{"role": "assistant", "content": "Reading it.", "tool_calls": [
        {"id": "call_read_1", "type": "function", "function": {"name": "read_file", "arguments": got[0]["arguments"]}}]},
        {"role": "tool", "tool_call_id": "call_read_1", "content": "print('hi')"}]
    oai.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
    rows = wait_messages(db, tenant, sid, 4)
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_streamed_client_tool_use_passes_through(db, tenant, ant, upstream, stream):
    upstream.push(Reply(text="Listing.", tool_calls=[("toolu_ls_1", "fs_list_root", {"depth": 1})]))
    tools = [{"name": "fs_list_root", "description": "list", "input_schema": {"type": "object"}}]
    kwargs = {"model": "claude-scripted-1", "max_tokens": 500, "tools": tools,
              "messages": [{"role": "user", "content": "What is here?"}]}
    if stream:
        with ant.messages.stream(**kwargs) as s:
            message = s.get_final_message()
    else:
        message = ant.messages.create(**kwargs)
    assert message.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "input", None)) for b in message.content] == [
        ("text", None), ("tool_use", {"depth": 1})]
    assert upstream.requests[-1]["tools"][0] == tools[0]  # then the phantom tools, if any


# ------------------------------------------------------------------------ phantom tools
PHANTOM_ARGS = {"question": "Which database did we choose?"}


@pytest.mark.parametrize("stream", [False, True])
def test_openai_phantom_call_is_answered_and_invisible(db, tenant, oai, upstream, phantom, stream):
    upstream.push(Reply(text="Let me check. ", tool_calls=[("call_mem_1", "memory_query", PHANTOM_ARGS)]),
                  Reply(text="We chose PostgreSQL.", usage=(40, 6)))
    messages = [{"role": "user", "content": "Which database did we pick?"}]
    raw = oai.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, stream=stream, stream_options={"include_usage": True} if stream else None)
    if stream:
        chunks = list(raw.parse())
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        assert len({c.id for c in chunks}) == 1
        usage = chunks[-1].usage
    else:
        completion = raw.parse()
        text, finish = completion.choices[0].message.content, [completion.choices[0].finish_reason]
        assert not completion.choices[0].message.tool_calls
        usage = completion.usage
    assert text == "Let me check. We chose PostgreSQL."
    assert finish == ["stop"]
    assert usage.prompt_tokens == 12 + 40  # both rounds
    # the phantom tools were offered, and the continuation carried the call and its answer
    first, second = upstream.requests[-2:]
    assert {"memory_query", "memory_restore", "memory_release"} <= {t["function"]["name"] for t in first["tools"]}
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_mem_1"
    answer = second["messages"][-1]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_mem_1" and answer["content"]
    rows = wait_messages(db, tenant, raw.headers["x-mnemo-session"], 2)
    assert rows[1]["content"] == "Let me check. We chose PostgreSQL." and not rows[1]["tool_calls"]
    assert rows[1]["metadata"]["memory_tool_calls"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_phantom_call_is_answered_and_invisible(db, tenant, ant, upstream, phantom, stream):
    upstream.push(Reply(text="Checking. ", tool_calls=[("toolu_mem_1", "memory_query", PHANTOM_ARGS)]),
                  Reply(text="PostgreSQL."))
    kwargs = {"model": "claude-scripted-1", "max_tokens": 500,
              "messages": [{"role": "user", "content": "Which database?"}]}
    if stream:
        with ant.messages.stream(**kwargs) as s:
            message = s.get_final_message()
    else:
        message = ant.messages.create(**kwargs)
    assert [b.type for b in message.content] == ["text", "text"]
    assert "".join(b.text for b in message.content) == "Checking. PostgreSQL."
    assert message.stop_reason == "end_turn"
    first, second = upstream.requests[-2:]
    assert "memory_query" in {t["name"] for t in first["tools"]}
    assert second["messages"][-2]["content"][-1]["type"] == "tool_use"
    result = second["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_mem_1"


def test_a_client_call_beside_a_phantom_call_reaches_the_client_alone(oai, upstream, phantom):
    upstream.push(Reply(tool_calls=[("call_mem_2", "memory_query", PHANTOM_ARGS),
                                    ("call_run_2", "run_tests", {"path": "tests"})]))
    tools = [{"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object"}}}]
    chunks = list(oai.chat.completions.create(model="gpt-4o", stream=True, tools=tools,
                                              messages=[{"role": "user", "content": "Run the tests."}]))
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert {d.index for d in deltas} == {0}
    assert [d.id for d in deltas if d.id] == ["call_run_2"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert len(upstream.requests) == 1  # the turn ends with the client's call


# ------------------------------------------------------------------------ failures
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [429, 500])
def test_upstream_errors_reach_the_openai_client_in_its_shape(oai, upstream, status, stream):
    upstream.push(Reply(status=status, error=f"scripted {status}"))
    with pytest.raises(openai.APIStatusError) as e:
        r = oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                        stream=stream)
        if stream:
            list(r)
    assert e.value.status_code == status
    assert e.value.body["message"] == f"scripted {status}"
    assert isinstance(e.value, openai.RateLimitError if status == 429 else openai.InternalServerError)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [429, 500])
def test_upstream_errors_reach_the_anthropic_client_in_its_shape(ant, upstream, status, stream):
    upstream.push(Reply(status=status, error=f"scripted {status}"))
    with pytest.raises(anthropic.APIStatusError) as e:
        kwargs = {"model": "claude-scripted-1", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
        if stream:
            with ant.messages.stream(**kwargs) as s:
                s.get_final_message()
        else:
            ant.messages.create(**kwargs)
    assert e.value.status_code == status
    assert e.value.body["error"]["message"] == f"scripted {status}"
    assert isinstance(e.value, anthropic.RateLimitError if status == 429 else anthropic.InternalServerError)


def test_an_unreachable_upstream_is_a_provider_shaped_502(tenant):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    server = start_proxy(f"http://127.0.0.1:{closed_port}")
    try:
        client = anthropic.Anthropic(base_url=server.url, api_key="sk-x", max_retries=0,
                                     default_headers={"X-Mnemo-Tenant": tenant})
        with pytest.raises(anthropic.APIStatusError) as e:
            client.messages.create(model="claude-scripted-1", max_tokens=10,
                                   messages=[{"role": "user", "content": "hi"}])
        assert e.value.status_code == 502 and e.value.body["error"]["type"] == "api_error"
    finally:
        server.stop()


def test_an_unknown_or_missing_tenant_is_refused_in_the_provider_shape(proxy):
    nobody = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-x", max_retries=0,
                           default_headers={"X-Mnemo-Tenant": "no_such_tenant_" + uuid.uuid4().hex[:6]})
    with pytest.raises(openai.PermissionDeniedError) as e:
        nobody.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["code"] == "unknown_tenant"
    anonymous = anthropic.Anthropic(base_url=proxy.url, api_key="sk-x", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        anonymous.messages.create(model="claude-scripted-1", max_tokens=10,
                                  messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "authentication_error"


def assert_key_acts_for(db, proxy, upstream, key: str, tenant: str) -> None:
    """A chat call through the proxy with a Mnemosyne key is managed for the key's
    tenant, and the upstream sees the proxy's provider key, never the caller's."""
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "keyed " + uuid.uuid4().hex}])
    assert raw.headers["x-mnemo-status"] == "managed"
    assert db._call("SELECT tenant_id FROM mnemo.sessions WHERE session_id = %(s)s",
                    {"s": raw.headers["x-mnemo-session"]}) == tenant
    assert upstream.last_headers["authorization"] == f"Bearer {PROVIDER_KEY}"


def test_a_proxy_key_names_the_tenant_and_never_goes_upstream(db, proxy, upstream, keyed_tenant, proxy_key):
    assert_key_acts_for(db, proxy, upstream, proxy_key, keyed_tenant)


def test_other_paths_pass_through_byte_for_byte(proxy, upstream, tenant):
    direct = httpx2.get(upstream.url + "/v1/models")
    via = httpx2.get(proxy.url + "/v1/models", headers={"X-Mnemo-Tenant": tenant})
    assert via.status_code == 200 and via.content == direct.content
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-x", max_retries=0,
                                 default_headers={"X-Mnemo-Tenant": tenant})
    counted = client.messages.count_tokens(model="claude-scripted-1", messages=[{"role": "user", "content": "x" * 400}])
    assert counted.input_tokens > 0
    assert upstream.requests[-1]["messages"] == [{"role": "user", "content": "x" * 400}]


class TcpRelay:
    """A TCP forwarder to the database that the test can cut: a database that drops."""

    def __init__(self, port: int):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.open = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.open:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.open = False
        self.listener.close()
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def test_a_dropped_database_passes_requests_through_unmanaged(db, tenant, upstream, caplog):
    info = psycopg.conninfo.conninfo_to_dict(DSN)
    relay = TcpRelay(int(info.get("port") or 5432))
    dsn = psycopg.conninfo.make_conninfo(DSN, host="127.0.0.1", port=str(relay.port))
    server = start_proxy(upstream.url, dsn=dsn)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-x", max_retries=0,
                               default_headers={"X-Mnemo-Tenant": tenant})
        first = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "before"}])
        assert first.headers["x-mnemo-status"] == "managed"
        relay.cut()
        caplog.set_level(logging.WARNING, logger="mnemosyne.proxy")
        messages = [{"role": "user", "content": "before"}, {"role": "assistant", "content": "Scripted answer."},
                    {"role": "user", "content": "after the database went away"}]
        for stream in (False, True):
            upstream.push(Reply(text="Still here."))
            raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages,
                                                                   stream=stream)
            text = openai_text(raw.parse())[0] if stream else raw.parse().choices[0].message.content
            assert text == "Still here." and raw.headers["x-mnemo-status"] == "bypass"
            assert upstream.requests[-1]["messages"] == messages  # exactly what the client sent
        assert any("passed through unmanaged (database unreachable" in r.message for r in caplog.records)
    finally:
        relay.cut()
        server.stop()


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_disconnect_cancels_the_upstream_call(proxy, upstream, tenant, stream):
    # streamed: 200 pieces 50 ms apart; whole: an answer after 10 s
    upstream.push(Reply(text="word " * 200, pieces=200, delay=0.05 if stream else 10.0))
    before, completed = upstream.cancelled, upstream.completed
    request = {"model": "gpt-4o", "stream": stream, "messages": [{"role": "user", "content": "Say many words."}]}
    headers = {"X-Mnemo-Tenant": tenant, "Authorization": "Bearer sk-x"}
    if stream:
        with httpx2.stream("POST", proxy.url + "/v1/chat/completions", timeout=30, headers=headers,
                           json=request) as r:
            assert r.status_code == 200
            for _ in r.iter_bytes():
                break  # the first piece, then the client goes away
    else:
        with pytest.raises(httpx2.ReadTimeout):  # the client gives up waiting
            httpx2.post(proxy.url + "/v1/chat/completions", timeout=httpx2.Timeout(30, read=2.0),
                        headers=headers, json=request)
    for _ in range(200):
        if upstream.cancelled > before:
            break
        time.sleep(0.05)
    assert upstream.cancelled == before + 1
    assert upstream.completed == completed
