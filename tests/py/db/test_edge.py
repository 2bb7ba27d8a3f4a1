"""The network edge (issue 40): API keys in the database, the key as the tenant on
every surface (the proxy, its HTTP API, MCP over HTTP), the database refusing a
request routed to another tenant, and the limits. Real servers on real sockets
(uvicorn), real HTTP clients, the real database; the upstream LLM is the scripted one."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx2
import psycopg
import pytest
import test_proxy
from conftest import DSN
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from mnemosyne.mcp_server import Identity, build_server, http_app
from mnemosyne.proxy import Config, create_app
from mnemosyne.proxy.scripted import Reply, ServerThread

# the scripted provider and its reset before each test, as test_proxy.py has them
upstream = test_proxy.upstream
fresh_script = test_proxy.fresh_script
PROVIDER_KEY = test_proxy.PROVIDER_KEY


def start_proxy(upstream_url: str, **kw) -> ServerThread:
    """The proxy in keys mode unless told otherwise, calling upstream with the provider key."""
    kw.setdefault("mode", "keys")
    return test_proxy.start_proxy(upstream_url, openai_api_key=PROVIDER_KEY, anthropic_api_key=PROVIDER_KEY, **kw)


@pytest.fixture(scope="module")
def proxy(upstream):
    server = start_proxy(upstream.url)  # keys mode, the default
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mcp_http():
    server = ServerThread(http_app(build_server(DSN, Identity()))).start()
    yield server
    server.stop()


@pytest.fixture()
def other(db):
    tid = "t_" + uuid.uuid4().hex[:12]
    db.create_tenant(tid)
    return tid


def new_key(db, tenant: str, **kw) -> str:
    return db.create_api_key(tenant, **kw)["secret"]


def bearer(key: str | None, **extra: str) -> dict:
    return {**({"Authorization": f"Bearer {key}"} if key else {}), **extra}


def api(proxy, name: str, body: dict, key: str | None, **headers: str) -> httpx2.Response:
    return httpx2.post(f"{proxy.url}/mnemo/v1/{name}", json=body, headers=bearer(key, **headers), timeout=60)


def chat(proxy, key: str | None, text: str = "hello", **headers: str) -> httpx2.Response:
    return httpx2.post(f"{proxy.url}/v1/chat/completions", headers=bearer(key, **headers), timeout=60,
                       json={"model": "gpt-4o", "messages": [{"role": "user", "content": text}]})


# ------------------------------------------------------------------------ keys in the database
def test_a_key_is_stored_as_a_hash_and_its_secret_shown_once(db, tenant):
    made = db.create_api_key(tenant, "ci", datetime.now(UTC) + timedelta(days=1))
    assert made["secret"].startswith(f"mnk_{made['key_id']}_") and len(made["secret"]) == 4 + 12 + 1 + 64
    rows = db._rows("SELECT * FROM mnemo_internal.api_keys WHERE tenant_id = %(t)s", {"t": tenant})
    assert len(rows) == 1 and made["secret"] not in str(rows) and made["secret"].split("_")[2] not in str(rows)
    listed = db.list_api_keys(tenant)
    assert [(k["key_id"], k["label"], k["state"]) for k in listed] == [(made["key_id"], "ci", "active")]
    assert "secret" not in listed[0] and made["secret"] not in str(listed)
    assert db.api_key_tenant(made["secret"]) == tenant
    assert db.list_api_keys(tenant)[0]["last_used_at"] is not None
    assert db.api_key_tenant(made["secret"][:-1] + ("0" if made["secret"][-1] != "0" else "1")) is None
    db.revoke_api_key(tenant, made["key_id"])
    assert db.api_key_tenant(made["secret"]) is None
    assert db.list_api_keys(tenant)[0]["state"] == "revoked"


def test_an_expired_key_resolves_to_no_tenant(db, tenant):
    made = db.create_api_key(tenant, "short", datetime.now(UTC) + timedelta(seconds=1))
    assert db.api_key_tenant(made["secret"]) == tenant
    db._call("UPDATE mnemo_internal.api_keys SET expires_at = now() - interval '1 second'"
             " WHERE key_id = %(k)s", {"k": made["key_id"]})
    assert db.api_key_tenant(made["secret"]) is None
    assert db.list_api_keys(tenant)[0]["state"] == "expired"


def test_key_arguments_are_checked(db, tenant, other):
    with pytest.raises(Exception, match="MN001|not in the future"):
        db.create_api_key(tenant, "past", datetime.now(UTC) - timedelta(days=1))
    with pytest.raises(Exception, match="200"):
        db.create_api_key(tenant, "x" * 201)
    key_id = db.create_api_key(other)["key_id"]
    with pytest.raises(Exception, match="no API key"):
        db.revoke_api_key(tenant, key_id)  # another tenant's key is not found
    assert db.list_api_keys(other)[0]["state"] == "active"


def test_the_database_refuses_a_tenant_other_than_the_transactions_key(db, tenant, other):
    """Defence in depth: with mnemo.api_key set to A's key, an API call for B fails
    in enter_tenant (MN008) before anything is read, whatever the service asked."""
    key = new_key(db, tenant)
    sid = db.start_session(other)
    db.record_message(other, sid, {"role": "user", "content": "B's secret plan"})
    with psycopg.connect(DSN) as conn, conn.transaction():
        conn.execute("SELECT set_config('mnemo.api_key', %s, true)", [key])
        assert conn.execute("SELECT count(*) FROM mnemo.list_sessions(%s)", [tenant]).fetchone()[0] == 0
        with pytest.raises(psycopg.Error) as e, conn.transaction():
            conn.execute("SELECT mnemo.compile_context(%s, %s)", [other, sid])
        assert e.value.sqlstate == "MN008"
    with psycopg.connect(DSN) as conn, conn.transaction():
        conn.execute("SELECT set_config('mnemo.api_key', %s, true)", ["mnk_" + "0" * 12 + "_" + "0" * 64])
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT * FROM mnemo.list_sessions(%s)", [tenant])
        assert e.value.sqlstate == "MN008"


def test_a_service_that_routes_to_the_wrong_tenant_is_refused_by_the_database(db, tenant, other, upstream):
    """A routing bug forced into the proxy: its edge resolves A's key to tenant B. Every
    database call of the request is bound to A's key, so the database refuses B: the
    proxy answers 403 and B's data is neither read nor written."""
    key = new_key(db, tenant)
    sid = db.start_session(other)
    db.record_message(other, sid, {"role": "user", "content": "B's secret plan"})
    app = create_app(Config(dsn=DSN, openai_base_url=upstream.url + "/v1", anthropic_base_url=upstream.url,
                            db_timeout=1.0, openai_api_key=PROVIDER_KEY, mode="keys"))

    async def misrouted(_key: str) -> str:
        return other

    app.resolve = misrouted
    server = ServerThread(app).start()
    try:
        before = db.memory_stats(other)["messages"]["count"]
        r = chat(server, key, "misrouted")
        assert r.status_code == 403 and r.json()["error"]["code"] == "MN008", r.text
        assert not upstream.requests  # nothing went upstream either
        r = api(server, "build_acb", {"session_id": str(sid), "query_text": "plan"}, key)
        assert r.status_code == 403 and r.json()["error"]["code"] == "MN008", r.text
        assert "secret plan" not in r.text
        r = api(server, "record_event", {"kind": "message", "content": {"text": "written?"}}, key)
        assert r.status_code == 403, r.text
        assert db.memory_stats(other)["messages"]["count"] == before
        assert [s["session_id"] for s in db.list_sessions(other)] == [sid]
    finally:
        server.stop()


# ------------------------------------------------------------------------ the key is the tenant
def test_no_key_is_401_in_each_surfaces_shape(proxy, mcp_http):
    r = chat(proxy, None)
    assert r.status_code == 401 and r.json()["error"]["code"] == "MN014"
    assert r.json()["error"]["type"] == "invalid_request_error"  # OpenAI's shape
    r = httpx2.post(proxy.url + "/v1/messages", json={"model": "claude-x", "max_tokens": 5, "messages": []},
                    headers={"X-Mnemo-Tenant": "anyone", "anthropic-version": "2023-06-01"})
    assert r.status_code == 401 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "authentication_error"  # Anthropic's shape
    r = api(proxy, "build_acb", {"tenant_id": "anyone"}, None, **{"X-Mnemo-Tenant": "anyone"})
    assert r.status_code == 401 and set(r.json()["error"]) == {"code", "message", "hint"}
    r = httpx2.get(proxy.url + "/v1/models")  # pass-through too: it would spend the provider key
    assert r.status_code == 401
    r = httpx2.post(mcp_http.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert r.status_code == 401 and r.json()["error"]["data"]["code"] == "MN014"


def test_a_provider_key_is_no_mnemosyne_key(proxy):
    r = chat(proxy, "sk-someone-elses-openai-key", **{"X-Mnemo-Tenant": "anyone"})
    assert r.status_code == 401


def test_own_key_acts_for_its_tenant_and_the_provider_key_goes_upstream(db, tenant, proxy, upstream):
    key = new_key(db, tenant)
    test_proxy.assert_key_acts_for(db, proxy, upstream, key, tenant)
    r = api(proxy, "record_event", {"kind": "message", "session_id": "s1", "content": {"text": "hi"}}, key)
    assert r.status_code == 200, r.text
    assert db.list_sessions(tenant, session_id=r.json()["session_id"])[0]["messages"] == 1


def test_a_foreign_tenant_in_the_body_or_header_is_403_and_nothing_is_read(db, tenant, other, proxy, upstream):
    key = new_key(db, tenant)
    sid = db.start_session(other)
    db.record_message(other, sid, {"role": "user", "content": "B's secret plan"})
    for name, body in (("build_acb", {"tenant_id": other, "session_id": str(sid), "query_text": "plan"}),
                       ("query_decisions", {"tenant_id": other}),
                       ("record_event", {"tenant_id": other, "kind": "message", "content": {"text": "x"}})):
        r = api(proxy, name, body, key)
        assert r.status_code == 403 and r.json()["error"]["code"] == "MN008", r.text
        assert "secret plan" not in r.text
    r = api(proxy, "build_acb", {"query_text": "plan"}, key, **{"X-Mnemo-Tenant": other})
    assert r.status_code == 403 and r.json()["error"]["code"] == "MN008"
    r = chat(proxy, key, **{"X-Mnemo-Tenant": other})
    assert r.status_code == 403 and not upstream.requests
    assert db.memory_stats(other)["messages"]["count"] == 1
    assert [s["session_id"] for s in db.list_sessions(other)] == [sid]


def test_another_tenants_ids_are_not_found(db, tenant, other, proxy):
    """A session, artifact or memory id of another tenant answers as an id that does not
    exist (404): refused, nothing of it shown, and no hint that it exists elsewhere."""
    key = new_key(db, tenant)
    sid = db.start_session(other)
    out = db.record_event(other, sid, "tool_result", {"tool": "fs.read", "text": "B's secret file\n" * 9000})
    before = db.memory_stats(other)["messages"]["count"]
    r = api(proxy, "get_artifact", {"artifact_id": out["artifact_id"]}, key)
    assert r.status_code == 404 and r.json()["error"]["code"] == "MN010" and "secret" not in r.text
    r = api(proxy, "build_acb", {"session_id": str(sid), "query_text": "secret"}, key)
    assert r.status_code == 404 and r.json()["error"]["code"] == "MN003" and "secret" not in r.text
    r = api(proxy, "record_event", {"session_id": str(sid), "kind": "message", "content": {"text": "x"}}, key)
    assert r.status_code == 404
    assert db.memory_stats(other)["messages"]["count"] == before


@pytest.mark.parametrize("state", ["revoked", "expired"])
def test_a_revoked_or_expired_key_is_401(db, tenant, proxy, mcp_http, state):
    made = db.create_api_key(tenant)
    assert chat(proxy, made["secret"]).status_code == 200
    if state == "revoked":
        db.revoke_api_key(tenant, made["key_id"])
    else:
        db._call("UPDATE mnemo_internal.api_keys SET expires_at = now() - interval '1 second'"
                 " WHERE key_id = %(k)s", {"k": made["key_id"]})
    r = chat(proxy, made["secret"])
    assert r.status_code == 401 and r.json()["error"]["code"] == "MN014"
    assert api(proxy, "query_decisions", {}, made["secret"]).status_code == 401
    r = httpx2.post(mcp_http.url + "/mcp", headers=bearer(made["secret"]),
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert r.status_code == 401


def mcp_call(url: str, key: str, tool: str, args: dict):
    async def run():
        transport = streamable_http_client(url + "/mcp", http_client=create_mcp_http_client(headers=bearer(key)))
        async with Client(transport) as c:
            return await c.call_tool(tool, args)
    return asyncio.run(run())


def test_mcp_over_http_acts_for_the_keys_tenant_only(db, tenant, other, mcp_http):
    key = new_key(db, tenant)
    r = mcp_call(mcp_http.url, key, "memory_record_event", {"kind": "message", "content": {"text": "via mcp"}})
    assert not r.is_error and r.structured_content["session_id"]
    assert db.list_sessions(tenant)[0]["messages"] == 1
    r = mcp_call(mcp_http.url, key, "memory_stats", {"tenant_id": other})
    assert r.is_error and "[MN008]" in r.content[0].text
    sid = db.start_session(other)
    r = mcp_call(mcp_http.url, key, "memory_stats", {"session_id": str(sid)})
    assert r.is_error or r.structured_content["messages"]["count"] == 0  # never B's figures


# ------------------------------------------------------------------------ limits
def test_a_body_over_the_cap_is_413_in_each_shape(db, tenant, upstream, mcp_http):
    server = start_proxy(upstream.url, max_body_bytes=10_000)
    key = new_key(db, tenant)
    try:
        big = "x" * 20_000
        r = chat(server, key, big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "MN007" and not upstream.requests
        r = api(server, "record_event", {"kind": "message", "content": {"text": big}}, key)
        assert r.status_code == 413 and set(r.json()["error"]) == {"code", "message", "hint"}

        def chunks():  # no Content-Length: counted as it arrives
            for _ in range(30):
                yield b"x" * 1000
        r = httpx2.post(server.url + "/mnemo/v1/record_event", content=chunks(), headers=bearer(key))
        assert r.status_code == 413
    finally:
        server.stop()
    assert db.memory_stats(tenant)["messages"]["count"] == 0


def test_a_tenant_over_its_concurrency_cap_gets_429(db, tenant, other, upstream):
    server = start_proxy(upstream.url, max_concurrent=2)
    key, other_key = new_key(db, tenant), new_key(db, other)
    try:
        upstream.default = Reply(text="slow", delay=0.4, pieces=4)
        results: list[int] = []
        threads = [threading.Thread(target=lambda: results.append(chat(server, key, uuid.uuid4().hex).status_code))
                   for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        r = chat(server, key)
        assert r.status_code == 429 and r.json()["error"]["code"] == "MN013"
        assert chat(server, other_key).status_code == 200  # another tenant is not held up
        for t in threads:
            t.join()
        assert results == [200, 200]
        assert chat(server, key).status_code == 200  # slots come back
    finally:
        server.stop()


def test_local_mode_acts_for_the_default_tenant_without_a_key(db, tenant, other, upstream):
    server = start_proxy(upstream.url, mode="local", default_tenant=tenant)
    try:
        r = chat(server, None)
        assert r.status_code == 200 and r.headers["x-mnemo-status"] == "managed"
        r = api(server, "query_decisions", {"tenant_id": other}, None)
        assert r.status_code == 403
        other_key = new_key(db, other)  # a key still acts for its own tenant
        r = chat(server, other_key, "keyed")
        assert db._call("SELECT tenant_id FROM mnemo.sessions WHERE session_id = %(s)s",
                        {"s": r.headers["x-mnemo-session"]}) == other
    finally:
        server.stop()



# ------------------------------------------------------------------------ bench-trust's HTTP parts, small
def bench_trust(part: str):
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    return importlib.import_module(f"trust.{part}")


def test_http_isolation_matrix_has_no_leak_and_every_cell_as_expected():
    figures = bench_trust("http_isolation").matrix(DSN)
    assert figures["cells"] >= 120
    assert (figures["leaks"], figures["mismatches"]) == (0, 0), (figures["leak_examples"],
                                                                 figures["mismatch_examples"])


def test_http_fuzz_small_run_has_no_5xx_traceback_or_other_shape():
    class Args:
        http_fuzz_requests = 400
    figures = bench_trust("http_fuzz").run(DSN, Args())
    assert figures["problems"] == 0, figures["examples"]
    assert figures["statuses"].get("400") and figures["statuses"].get("413") and figures["slow_clients"].get("408")


# ------------------------------------------------------------------------ one error shape (first contact)
def test_http_api_errors_have_one_shape_with_a_project_code(db, tenant, proxy):
    key = new_key(db, tenant)
    r = api(proxy, "record_event", {"kind": "message"}, key)  # no content: was a plain-text 500
    assert r.status_code == 400 and r.json()["error"]["code"] == "MN001"
    assert "content" in r.json()["error"]["message"] and "pydantic" not in r.text
    r = api(proxy, "get_artifact", {"artifact_id": "abc"}, key)  # was "invalid literal for int()"
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "MN001" and "invalid literal" not in r.text and err["hint"]
    r = api(proxy, "build_acb", {"session_id": "not a uuid"}, key)
    assert r.status_code == 200  # any string names a session of its own
    r = api(proxy, "query_decisions", {"session_id": "not a uuid"}, key)
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "MN001" and "HINT" not in err["message"]
    r = api(proxy, "record_event", {"kind": "message", "content": {"text": "a\u0000b"}}, key)
    assert r.status_code == 400 and set(r.json()["error"]) == {"code", "message", "hint"}
    for r in (api(proxy, "nonsense", {}, key), httpx2.post(f"{proxy.url}/mnemo/v1/build_acb", content=b"{",
                                                          headers=bearer(key))):
        assert r.status_code in (400, 404) and set(r.json()["error"]) == {"code", "message", "hint"}


def test_mcp_argument_errors_are_mn001_without_pydantic_text(db, tenant, mcp_http):
    key = new_key(db, tenant)
    r = mcp_call(mcp_http.url, key, "memory_record_event", {"kind": "message"})
    text = r.content[0].text
    assert r.is_error and "[MN001]" in text and "content" in text
    assert "pydantic" not in text and "http" not in text
    r = mcp_call(mcp_http.url, key, "memory_get_artifact", {"artifact_id": "abc"})
    assert r.is_error and "[MN001]" in r.content[0].text and "pydantic" not in r.content[0].text


def test_a_dropped_database_lets_a_recently_accepted_key_through_unmanaged(db, tenant, upstream):
    """The agent is never blocked by its memory: with the database gone, a key the
    database accepted moments ago still names its tenant and the call goes upstream
    unmanaged; a key never seen gets 503."""
    info = psycopg.conninfo.conninfo_to_dict(DSN)
    relay = test_proxy.TcpRelay(int(info.get("port") or 5432))
    dsn = psycopg.conninfo.make_conninfo(DSN, host="127.0.0.1", port=str(relay.port))
    key, unseen = new_key(db, tenant), new_key(db, tenant)
    server = ServerThread(create_app(Config(dsn=dsn, openai_base_url=upstream.url + "/v1",
                                            anthropic_base_url=upstream.url, db_timeout=1.0, mode="keys",
                                            openai_api_key=PROVIDER_KEY))).start()
    try:
        assert chat(server, key, "before").headers["x-mnemo-status"] == "managed"
        relay.cut()
        r = chat(server, key, "after")
        assert r.status_code == 200 and r.headers["x-mnemo-status"] == "bypass"
        assert upstream.last_headers["authorization"] == f"Bearer {PROVIDER_KEY}"
        r = chat(server, unseen, "never seen")
        assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
    finally:
        server.stop()
