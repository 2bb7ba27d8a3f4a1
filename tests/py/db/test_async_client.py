"""The async client (mnemosyne.aio) and the sync client's calls, against the real
database: the same methods, the same exception mapping, every method called once by
each client in one scenario."""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid

import pytest
from conftest import DSN

from mnemosyne import Client, connect
from mnemosyne.aio import AsyncClient, connect_async
from mnemosyne.client import SqlApi
from mnemosyne.errors import (
    InvalidMessage,
    InvalidParameter,
    NotFound,
    UnknownSession,
    UnknownTenant,
)


def public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_the_two_clients_have_the_same_methods():
    assert public(Client) == public(AsyncClient)
    # every API method is SqlApi's own (shared), not redefined by either client
    api = public(SqlApi)
    assert api and public(Client) - api == {"close"}
    for name in api:
        assert getattr(Client, name) is getattr(SqlApi, name) is getattr(AsyncClient, name), name
    assert inspect.iscoroutinefunction(AsyncClient.close)


async def settle(value):
    return await value if inspect.isawaitable(value) else value


async def scenario(m: Client | AsyncClient) -> set[str]:
    """Calls every API method once; returns the names it called."""
    called: set[str] = set()

    async def call(name: str, *args, **kwargs):
        called.add(name)
        return await settle(getattr(m, name)(*args, **kwargs))

    tenant = "t_" + uuid.uuid4().hex[:12]
    assert await call("create_tenant", tenant) == tenant
    sid = await call("start_session", tenant, context_window=8192, system_prompt="Be brief.")
    await call("record_message", tenant, sid, {"role": "user", "content": "The build server is ci-7."})
    await call("record_message", tenant, sid, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]})
    big = "line of build log\n" * 5000
    await call("record_message", tenant, sid, {"role": "tool", "tool_call_id": "c1", "content": big})
    ev = await call("record_event", tenant, sid, "decision",
                    {"decision": "Use ci-7 for nightly builds", "rationale": ["it is idle at night"]})
    assert ev["event_id"]
    mid = await call("remember", tenant, "The release manager is Ana", kind="fact")
    new = await call("correct", tenant, mid, "The release manager is Bo", "handover")
    assert new != mid
    assert await call("forget", tenant, new) == 1
    assert (await call("query_decisions", tenant, "nightly builds"))[0]["decision"].startswith("Use ci-7")
    art = (await call("export_tenant", tenant))[4]["message"]["content"]
    assert art == big  # the export carries the artifact's full bytes
    hits = await call("search", tenant, "which build server?", limit=3)
    assert hits and {"source", "score", "cosine", "lexical"} <= set(hits[0])
    stats = await call("memory_stats", tenant, sid)
    assert stats["messages"]["artifacts"] == 1
    assert (await call("list_sessions", tenant, session_id=sid))[0]["messages"] == 3
    assert (await call("compile_context", tenant, sid, log=False))[0]["content"] == "Be brief."
    bundle = await call("compile_context_bundle", tenant, sid, "build server", log=False)
    assert bundle["report"]["items"]
    acb = await call("build_acb", tenant, sid, "build server", max_tokens=3000, log=False)
    assert acb["budget_tokens"] == 3000
    assert len(await call("embed", "hello")) == 384
    assert [len(v) for v in await call("embed_batch", ["a", "b"])] == [384, 384]
    assert await call("count_tokens", "hello world") == 2
    # paging: the build log is one object (msg:N names it), queried, released, restored
    log_id = "msg:" + str(await settle(m._call(
        "SELECT max(message_id) FROM mnemo.messages WHERE tenant_id = %(t)s AND role = 'tool'", {"t": tenant})))
    assert (await call("memory_release", tenant, sid, [log_id]))["released"][0]["fidelity"] == "stub"
    assert (await call("memory_query", tenant, sid, "what is in the build log?", max_tokens=40))["sources"]
    assert (await call("memory_restore", tenant, sid, log_id))["fidelity"] == "full"
    answer = await call("handle_tool_call", tenant, sid, {"id": "p1", "type": "function", "function": {
        "name": "memory_release", "arguments": json.dumps({"ids": [log_id]})}})
    assert answer["role"] == "tool" and answer["tool_call_id"] == "p1"
    assert (await call("paging_metrics", tenant, sid))["restore_faults"] == 1
    held = await call("memory_objects", tenant, sid, limit=10)
    assert held["objects"] and sum(f["objects"] for f in held["by_fidelity"].values()) >= len(held["objects"])
    await call("run_jobs", worker=15)
    await call("run_sweep", "working_memory", tenant_id=tenant)
    assert any(r["job"].endswith("working-memory") or "working_memory" in r["job"]
               for r in await call("lifecycle_status"))
    await call("set_helper_llm", "http://127.0.0.1:9/v1", "tiny", enabled=False)
    await call("set_helper_llm", None)
    assert (await call("status"))["embedding"]["dims"] == 384
    assert await call("retry_jobs", tenant) == 0
    assert all(j["tenant_id"] == tenant for j in await call("list_jobs", tenant_id=tenant))
    assert tenant in {t["tenant_id"] for t in await call("list_tenants")}
    # the tool output was stored as an artifact, which get_artifact returns in full
    stored = await settle(m._call("SELECT max(artifact_id) FROM mnemo.artifacts WHERE tenant_id = %(t)s",
                                  {"t": tenant}))
    assert bytes(await call("get_artifact", tenant, stored)) == big.encode()
    # the proxy's write path: a keyed session, a resent history recorded once
    # API keys (issue 40): the secret once, its tenant, revoked
    made = await call("create_api_key", tenant, "scenario")
    assert await call("api_key_tenant", made["secret"]) == tenant
    assert [k["state"] for k in await call("list_api_keys", tenant)] == ["active"]
    assert (await call("revoke_api_key", tenant, made["key_id"]))["key_id"] == made["key_id"]
    assert await settle(m.api_key_tenant(made["secret"])) is None
    keyed = await call("open_session", tenant, "conv:scenario", system_prompt="Be brief.")
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert (await call("sync_messages", tenant, keyed, history))["recorded"] == 1
    assert (await settle(m.sync_messages(tenant, keyed, history)))["recorded"] == 0
    # a turn in one call: its ids in order
    turn = await call("record_messages", tenant, keyed, [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "a.txt"}], metadata=[{"model": "m"}, {}])
    assert len(turn) == 2 and turn[0] < turn[1]
    return called


def test_every_method_of_the_sync_client():
    with connect(DSN) as m:
        assert asyncio.run(scenario(m)) == public(SqlApi)


def test_every_method_of_the_async_client():
    async def run():
        async with await connect_async(DSN) as m:
            return await scenario(m)
    assert asyncio.run(run()) == public(SqlApi)


@pytest.mark.parametrize("call, error", [
    (lambda m, t: m.list_sessions("t_nobody_" + t), UnknownTenant),
    (lambda m, t: m.record_message(t, uuid.UUID(int=7), {"role": "user", "content": "x"}), UnknownSession),
    (lambda m, t: m.record_messages(t, uuid.UUID(int=7), [{"role": "user", "content": "x"}]), UnknownSession),
    (lambda m, t: m.search(t, " "), InvalidParameter),
    (lambda m, t: m.get_artifact(t, -1), NotFound),
    (lambda m, t: m.retry_jobs(t, [-1]), NotFound),
])
def test_the_same_exceptions(call, error):
    """Both clients raise the project's exception classes, with message and hint."""
    tenant = "t_" + uuid.uuid4().hex[:12]
    with connect(DSN) as m:
        m.create_tenant(tenant)
        with pytest.raises(error) as sync_err:
            call(m, tenant)

    async def run():
        async with await connect_async(DSN) as a:
            with pytest.raises(error) as async_err:
                await call(a, tenant)
            return async_err
    async_err = asyncio.run(run())
    assert str(async_err.value) == str(sync_err.value)


def test_the_async_pool_runs_calls_side_by_side():
    """Calls on one AsyncClient share its pool: concurrent writes all land, in order per session."""
    async def run():
        async with await connect_async(DSN, max_size=4) as m:
            tenant = await m.create_tenant("t_" + uuid.uuid4().hex[:12])
            sids = [await m.start_session(tenant) for _ in range(4)]

            async def talk(sid):
                for i in range(5):
                    await m.record_message(tenant, sid, {"role": "user", "content": f"turn {i}"})
            await asyncio.gather(*(talk(s) for s in sids))
            with pytest.raises(InvalidMessage):
                await m.record_message(tenant, sids[0], {"role": "robot", "content": "x"})
            return [r["messages"] for r in await m.list_sessions(tenant)]
    assert asyncio.run(run()) == [5, 5, 5, 5]
