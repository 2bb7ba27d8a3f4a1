"""The MCP server, driven by the official SDK's own client: over stdio (the server a
subprocess, as Claude Desktop / Claude Code / opencode start it) and over
streamable HTTP. Lists the tools, calls each, checks the errors and where identity
comes from (server configuration or per-call arguments)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid

from conftest import DSN
from mcp import Client, StdioServerParameters

from mnemosyne.mcp_server import TOOLS

NAMES = {"memory_record_event", "memory_build_acb", "memory_get_artifact", "memory_query_decisions",
         "memory_stats", "memory_search", "memory_query", "memory_restore", "memory_release", "memory_objects"}


def stdio(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "mnemosyne.cli", "mcp", *args],
                                 env={"DATABASE_URL": DSN, "PATH": os.environ.get("PATH", "")})


def body(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error(result) -> str:
    assert result.is_error
    return result.content[0].text


def test_the_registry_is_the_tool_list():
    assert {name for name, _ in TOOLS} == NAMES


def test_tool_names_are_valid_anthropic_tool_names():
    """MCP clients hand the tool names to the model's API: Anthropic's Messages API
    refuses a tools list with a name outside ^[a-zA-Z0-9_-]{1,64}$ (a dot included)."""
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) for name, _ in TOOLS)


def test_tools_over_stdio(db, tenant):
    async def run():
        async with Client(stdio("--tenant", tenant, "--agent", "tester")) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == NAMES
            assert {"tenant_id", "session_id", "agent_id", "channel"} <= set(
                tools["memory_record_event"].input_schema["properties"])
            assert tools["memory_record_event"].input_schema["required"] == ["kind", "content"]

            said = body(await c.call_tool("memory_record_event", {
                "kind": "message", "content": {"text": "Our staging host is stg-4."},
                "actor": {"type": "human", "id": "ana"}}))
            assert said["event_id"].startswith("msg_")
            session = said["session_id"]
            call = body(await c.call_tool("memory_record_event", {
                "kind": "tool_call", "content": {"tool": "fs.read_file", "id": "c1",
                                                 "arguments": {"path": "deploy.log"}}}))
            big = "deploy step ok\n" * 6000
            result = body(await c.call_tool("memory_record_event", {
                "kind": "tool_result", "content": {"tool": "fs.read_file", "tool_call_id": "c1", "text": big}}))
            assert result["session_id"] == call["session_id"] == session  # one session per agent + channel
            decided = body(await c.call_tool("memory_record_event", {
                "kind": "decision", "content": {"decision": "Deploy staging from main",
                                                "rationale": ["main is always green"]}}))
            assert decided["memory_id"]

            acb = body(await c.call_tool("memory_build_acb", {"query_text": "staging host", "max_tokens": 3000,
                                                              "intent": "repo_onboarding"}))
            assert acb["acb_id"].startswith("acb_") and acb["budget_tokens"] == 3000
            names = [s["name"] for s in acb["sections"]]
            assert "recent_window" in names
            window = next(s for s in acb["sections"] if s["name"] == "recent_window")
            assert any("stg-4" in i["text"] for i in window["items"])
            assert acb["provenance"]["intent"] == "repo_onboarding" and acb["provenance"]["agent_id"] == "tester"
            assert acb["messages"][-1]["role"] in ("tool", "assistant", "user")

            artifact_id = db._call("SELECT max(artifact_id) FROM mnemo.artifacts WHERE tenant_id = %(t)s",
                                   {"t": tenant})
            art = body(await c.call_tool("memory_get_artifact", {"artifact_id": artifact_id}))
            assert art["text"] == big and art["bytes"] == len(big)

            found = body(await c.call_tool("memory_query_decisions", {"query": "deploy staging"}))
            assert found["decisions"][0]["rationale"] == ["main is always green"]
            scoped = body(await c.call_tool("memory_query_decisions", {"session_id": str(uuid.UUID(int=1))}))
            assert scoped["decisions"] == []

            stats = body(await c.call_tool("memory_stats", {}))
            assert stats["tenant_id"] == tenant and stats["messages"]["count"] == 3
            assert body(await c.call_tool("memory_stats", {"session_id": session}))["messages"]["artifacts"] == 1
            return session

    session = asyncio.run(run())
    held = db.list_sessions(tenant)
    assert [(str(s["session_id"]), s["agent_id"], s["messages"]) for s in held] == [(session, "tester", 3)]


def test_paging_tools_over_stdio(db, tenant):
    """memory_objects shows the session's objects; memory_release sends one to stub,
    memory_query answers from it without restoring it, memory_restore brings it back
    pinned; memory_stats carries paging's figures; bad ids get the project's errors."""
    sid = db.start_session(tenant, agent_id="coder", context_window=32000)
    db.record_message(tenant, sid, {"role": "user", "content": "Which port does the config set?"})
    db.record_message(tenant, sid, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "Read",
                                                       "arguments": json.dumps({"file_path": "config.toml"})}}]})
    db.record_message(tenant, sid, {"role": "tool", "tool_call_id": "c1",
                                    "content": "port = 6543\nhost = \"db.internal\"\nworkers = 12"})

    async def run():
        async with Client(stdio("--tenant", tenant, "--session", str(sid))) as c:
            held = body(await c.call_tool("memory_objects", {}))
            read = next(o for o in held["objects"] if o["source"] == "config.toml")
            assert read["kind"] == "file_context" and read["fidelity"] == "full"
            assert held["by_fidelity"]["full"]["objects"] == len(held["objects"]) and held["zone"] == "normal"
            released = body(await c.call_tool("memory_release", {"ids": [read["id"]], "reason": "done"}))
            assert released["released"] == [{"id": read["id"], "fidelity": "stub"}]
            assert next(o for o in body(await c.call_tool("memory_objects", {}))["objects"]
                        if o["id"] == read["id"])["fidelity"] == "stub"
            answer = body(await c.call_tool("memory_query", {"question": "which port is set?"}))
            assert "6543" in answer["answer"]
            restored = body(await c.call_tool("memory_restore", {"id": read["id"]}))
            assert restored["fidelity"] == "full" and "workers = 12" in restored["content"]
            now = next(o for o in body(await c.call_tool("memory_objects", {"limit": 50}))["objects"]
                       if o["id"] == read["id"])
            assert now["fidelity"] == "full" and now["pinned"]
            paging = body(await c.call_tool("memory_stats", {"session_id": str(sid)}))["paging"]
            assert paging["restore_faults"] == 1 and paging["micro_faults"] == 1
            assert "[MN001]" in error(await c.call_tool("memory_restore", {"id": "page 3"}))
            assert "[MN010]" in error(await c.call_tool("memory_restore", {"id": "obj:999999999"}))
            assert "[MN001]" in error(await c.call_tool("memory_release", {"ids": []}))
            assert "[MN001]" in error(await c.call_tool("memory_objects", {"limit": 0}))
    asyncio.run(run())


def test_errors_over_stdio(tenant):
    async def run():
        async with Client(stdio("--tenant", tenant)) as c:
            assert "[MN002] unknown tenant" in error(await c.call_tool("memory_stats", {"tenant_id": "t_nobody_x"}))
            assert "[MN001]" in error(await c.call_tool("memory_build_acb", {"session_id": "not-a-uuid"}))
            assert "[MN003]" in error(await c.call_tool("memory_stats", {"session_id": str(uuid.UUID(int=5))}))
            assert "[MN001]" in error(await c.call_tool("memory_get_artifact", {"artifact_id": -1}))  # ids start at 1
            assert "[MN010]" in error(await c.call_tool("memory_get_artifact", {"artifact_id": 10**12}))
            assert "MN00" in error(await c.call_tool("memory_record_event", {"kind": "gossip", "content": {}}))
            assert "[MN004]" in error(await c.call_tool("memory_record_event",
                                                        {"kind": "tool_call", "content": {"arguments": {}}}))
            assert "[MN001]" in error(await c.call_tool("memory_build_acb", {"max_tokens": -5}))
            assert "kind" in error(await c.call_tool("memory_record_event", {"content": {"text": "x"}}))
            assert error(await c.call_tool("memory_forget_everything", {}))
        async with Client(stdio()) as c:  # no tenant configured and none given
            assert "tenant_id is required" in error(await c.call_tool("memory_stats", {}))
    asyncio.run(run())


def test_identity_from_configuration_and_per_call(db, tenant):
    configured = db.start_session(tenant, agent_id="planner")
    other_tenant = "t_" + uuid.uuid4().hex[:12]
    db.create_tenant(other_tenant)
    explicit = db.start_session(other_tenant, agent_id="coder")

    async def run():
        async with Client(stdio("--tenant", tenant, "--session", str(configured), "--channel", "team")) as c:
            body(await c.call_tool("memory_record_event", {"kind": "message", "content": {"text": "configured"}}))
            body(await c.call_tool("memory_record_event", {
                "kind": "message", "content": {"text": "per call"}, "tenant_id": other_tenant,
                "session_id": str(explicit), "agent_id": "coder"}))
            acb = body(await c.call_tool("memory_build_acb", {"query_text": "configured"}))
            assert acb["provenance"]["channel"] == "team"
    asyncio.run(run())
    assert [s["messages"] for s in db.list_sessions(tenant)] == [1]
    assert [m["message"]["content"] for m in db.export_tenant(other_tenant) if m["type"] == "message"] == ["per call"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tools_over_streamable_http(tenant):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mnemosyne.cli", "mcp", "--transport", "http", "--port",
                             str(port), "--tenant", tenant], env={**os.environ, "DATABASE_URL": DSN},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.1)

        async def run():
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                assert {t.name for t in (await c.list_tools()).tools} == NAMES
                said = body(await c.call_tool("memory_record_event", {"kind": "message", "content": {"text": "hi"}}))
                stats = body(await c.call_tool("memory_stats", {"session_id": said["session_id"]}))
                assert stats["messages"]["count"] == 1
                # local mode acts for --tenant alone: another tenant named is refused
                assert "[MN008]" in error(await c.call_tool("memory_stats", {"tenant_id": "t_nobody_y"}))
        asyncio.run(run())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_tool_results_are_json_text_too(tenant):
    """Clients that read only the text content get the same object as JSON."""
    async def run():
        async with Client(stdio("--tenant", tenant)) as c:
            r = await c.call_tool("memory_stats", {})
            assert json.loads(r.content[0].text) == r.structured_content
    asyncio.run(run())


def test_memory_search_finds_what_another_session_told(db, tenant):
    """The call a Mem0 or Zep user reaches for first: search across sessions, with ids,
    scores and dates, and kinds to narrow it."""
    told = db.start_session(tenant)
    db.record_message(tenant, told, {"role": "user", "content": "I moved to Lisbon last spring."})
    mem = db.remember(tenant, "The user lives in Lisbon.", kind="fact")

    async def run():
        async with Client(stdio("--tenant", tenant)) as c:
            found = body(await c.call_tool("memory_search", {"query": "which city did I move to Lisbon", "k": 5}))
            only_facts = body(await c.call_tool("memory_search", {"query": "Lisbon", "kinds": ["fact"]}))
            only_history = body(await c.call_tool("memory_search", {"query": "Lisbon", "kinds": ["message"]}))
            bad = error(await c.call_tool("memory_search", {"query": "Lisbon", "k": 0}))
            return found, only_facts, only_history, bad
    found, only_facts, only_history, bad = asyncio.run(run())
    ids = [i["id"] for i in found["items"]]
    assert f"mem:{mem}" in ids and any(i.startswith("msg:") for i in ids)
    item = found["items"][0]
    assert {"id", "kind", "content", "score", "created_at", "session_id"} <= set(item) and item["score"] > 0
    assert [i["kind"] for i in only_facts["items"]] == ["fact"]
    assert only_history["items"] and {i["kind"] for i in only_history["items"]} == {"message"}
    assert only_history["items"][0]["session_id"] == str(told)
    assert "[MN001]" in bad
