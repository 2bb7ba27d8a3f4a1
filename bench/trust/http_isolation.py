"""HTTP isolation matrix (issue 40): every endpoint of the proxy, its HTTP API and MCP
over HTTP, against every way of naming a tenant.

Tenant V (the victim) holds data marked with a canary string: a conversation, a
large tool output (an artifact), a memory and a decision. Tenant X (the caller) has
a key. Each request is shaped at V's data (V's session, artifact and memory ids,
V's conversation), and is sent as:

  no key, own key (V's: the legitimate case), other tenant's key (X's), revoked key
  (V's, revoked), expired key (V's, expired), and X's key with V named in the body
  (tenant_id), the header (X-Mnemo-Tenant), a session id, an artifact id or a memory id.

Expected per cell: 401 (no, revoked or expired key), 403 (V named in body or header),
404 / the tool's MN003 or MN010 (V's ids: another tenant's id is an id that does not
exist, so a caller learns nothing, not even that it exists), 200 otherwise; a cell
where a surface takes no such argument is n/a. A leak is V's canary in anything a
non-V cell gets back (body, headers) or sends upstream, or any change to V's data
(its rows counted before and after, as the owner). Goals: 0 leaks, every cell as
expected. The servers are the real ones (uvicorn on sockets), the database the real
one; the upstream LLM is the scripted provider.

``matrix(dsn)`` is shared by tests/py/db/test_edge.py and ``run(dsn, args)``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx2
import psycopg

from mnemosyne import connect
from mnemosyne.mcp_server import TOOLS, Identity, build_server, http_app
from mnemosyne.proxy import Config, create_app
from mnemosyne.proxy.scripted import Reply, ScriptedUpstream, ServerThread

CELLS = ("no key", "own key", "other tenant's key", "revoked key", "expired key", "foreign tenant in body",
         "foreign tenant in header", "foreign session id", "foreign artifact id", "foreign memory id")
MCP_ACCEPT = "application/json, text/event-stream"


@dataclass
class World:
    """The two tenants, the victim's ids and the callers' keys."""
    victim: str
    caller: str
    canary: str
    session: str
    artifact: int
    memory: int
    keys: dict[str, str] = field(default_factory=dict)


def setup(dsn: str) -> World:
    run = secrets.token_hex(4)
    victim, caller, canary = f"iso_v_{run}", f"iso_x_{run}", f"CANARY{secrets.token_hex(8)}"
    with connect(dsn) as db:
        for t in (victim, caller):
            db.create_tenant(t, config={"formation": {"method": "off"}})
        sid = db.start_session(victim, agent_id="victim")
        db.record_message(victim, sid, {"role": "user", "content": f"my secret is {canary}"})
        out = db.record_event(victim, sid, "tool_result", {"tool": "fs.read", "text": f"{canary}\n" * 8000})
        db.record_event(victim, sid, "decision", {"decision": f"use {canary}", "rationale": [canary]})
        memory = db.remember(victim, f"the vault code is {canary}", kind="fact", session_id=sid)
        world = World(victim, caller, canary, str(sid), int(out["artifact_id"]), int(memory))
        world.keys["own"] = db.create_api_key(victim, "iso own")["secret"]
        world.keys["other"] = db.create_api_key(caller, "iso other")["secret"]
        revoked = db.create_api_key(victim, "iso revoked")
        db.revoke_api_key(victim, revoked["key_id"])
        world.keys["revoked"] = revoked["secret"]
        expired = db.create_api_key(victim, "iso expired", datetime.now(UTC) + timedelta(days=1))
        db._call("UPDATE mnemo_internal.api_keys SET expires_at = now() - interval '1 second'"
                 " WHERE key_id = %(k)s", {"k": expired["key_id"]})
        world.keys["expired"] = expired["secret"]
    return world


def fingerprint(dsn: str, tenant: str) -> tuple:
    """The victim's rows a caller could write, counted as the owner (not what the
    lifecycle's sweeps derive in the background: access counts, tiers)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return tuple(conn.execute(f"SELECT count(*) FROM mnemo.{t} WHERE tenant_id = %s", (tenant,)).fetchone()[0]
                     for t in ("sessions", "messages", "memories", "artifacts", "transcripts", "tool_calls"))


# ------------------------------------------------------------------------ requests
def cell_request(w: World, cell: str) -> tuple[str | None, dict, dict]:
    """(key, extra headers, body overrides) of a cell."""
    key = {"no key": None, "own key": w.keys["own"], "revoked key": w.keys["revoked"],
           "expired key": w.keys["expired"]}.get(cell, w.keys["other"])
    headers = {"X-Mnemo-Tenant": w.victim} if cell == "foreign tenant in header" else {}
    body = {"tenant_id": w.victim} if cell == "foreign tenant in body" else {}
    return key, headers, body


def expected(cell: str, endpoint: str) -> str | None:
    """The expected outcome of a cell: an HTTP status, or a tool's project code; None: n/a."""
    if cell in ("no key", "revoked key", "expired key"):
        return "401"
    if cell == "foreign tenant in header":
        return "403"
    if cell == "foreign tenant in body":
        return "403" if endpoint.startswith("api ") else ("MN008" if endpoint.startswith("mcp ") else None)
    if cell == "foreign session id":
        # a filter (query_decisions) finds nothing; the proxy opens the caller's own
        # session under that id (X-Mnemo-Session is any key of the caller's)
        if endpoint in ("mcp memory_query_decisions",):
            return "ok"
        if endpoint.startswith("mcp ") and endpoint not in ("mcp memory_get_artifact", "mcp memory_search"):
            return "MN003"
        return {"api record_event": "404", "api build_acb": "404", "api query_decisions": "200",
                "openai chat": "200", "anthropic messages": "200"}.get(endpoint)
    if cell == "foreign artifact id":
        return {"api get_artifact": "404", "mcp memory_get_artifact": "MN010"}.get(endpoint)
    if cell == "foreign memory id":
        return {"mcp memory_restore": "MN010", "mcp memory_release": "MN010", "mcp memory_query": "ok"}.get(endpoint)
    if cell == "other tenant's key":  # the victim's ids, presented with the caller's key
        return {"api get_artifact": "404", "mcp memory_get_artifact": "MN010", "mcp memory_restore": "MN010",
                "mcp memory_release": "MN010"}.get(endpoint, "200" if not endpoint.startswith("mcp ") else "ok")
    return "200" if not endpoint.startswith("mcp ") else "ok"


def proxy_call(client: httpx2.Client, url: str, w: World, endpoint: str, cell: str,
               victim_session: str) -> tuple[str, str]:
    key, headers, over = cell_request(w, cell)
    h = {**({"Authorization": f"Bearer {key}"} if key else {}), **headers}
    conversation = [{"role": "user", "content": "what is my secret?"}]
    if cell == "foreign session id":
        h["X-Mnemo-Session"] = victim_session
    if endpoint == "openai chat":
        r = client.post(url + "/v1/chat/completions", headers=h,
                        json={"model": "gpt-4o", "messages": conversation, **over})
    elif endpoint == "anthropic messages":
        r = client.post(url + "/v1/messages", headers={**h, "anthropic-version": "2023-06-01"},
                        json={"model": "claude-x", "max_tokens": 50, "messages": conversation, **over})
    elif endpoint == "passthrough models":
        r = client.get(url + "/v1/models", headers=h)
    else:
        name = endpoint.split()[1]
        args: dict = {"record_event": {"kind": "message", "content": {"text": "hello"}},
                      "build_acb": {"query_text": "secret"}, "query_decisions": {"query": "use"},
                      "get_artifact": {"artifact_id": 1}}[name]
        if cell == "foreign session id" and name != "get_artifact":
            args["session_id"] = w.session
        if name == "get_artifact" and cell in ("foreign artifact id", "own key", "other tenant's key"):
            args["artifact_id"] = w.artifact
        r = client.post(f"{url}/mnemo/v1/{name}", headers=h, json={**args, **over})
    return str(r.status_code), r.text + json.dumps(dict(r.headers))


def tool_args(w: World, tool: str, cell: str) -> dict:
    args: dict = {"memory_record_event": {"kind": "message", "content": {"text": "hello"}},
                  "memory_build_acb": {"query_text": "secret"}, "memory_get_artifact": {"artifact_id": 1},
                  "memory_query_decisions": {"query": "use"}, "memory_stats": {},
                  "memory_query": {"question": "what is the vault code?"},
                  "memory_restore": {"id": "mem:1"}, "memory_release": {"ids": ["mem:1"]},
                  "memory_objects": {}, "memory_search": {"query": "vault code"}}[tool]
    if cell == "foreign tenant in body":
        args["tenant_id"] = w.victim
    if cell == "foreign session id" and tool not in ("memory_get_artifact", "memory_search"):
        args["session_id"] = w.session
    if tool == "memory_get_artifact" and cell in ("foreign artifact id", "own key", "other tenant's key"):
        args["artifact_id"] = w.artifact
    if cell in ("foreign memory id", "own key", "other tenant's key") and tool in ("memory_restore",
                                                                                  "memory_release"):
        key = "id" if tool == "memory_restore" else "ids"
        args[key] = f"mem:{w.memory}" if key == "id" else [f"mem:{w.memory}"]
    if cell == "foreign memory id" and tool == "memory_query":
        args["scope"] = f"mem:{w.memory}"
    return args


async def mcp_call(url: str, w: World, tool: str, cell: str) -> tuple[str, str]:
    """One tool call over MCP's streamable HTTP, as raw JSON-RPC: initialize, then
    tools/call. The outcome: the HTTP status when the edge refuses, else the tool's
    project code ([MNxxx]) or ok."""
    key, headers, _ = cell_request(w, cell)
    h = {**({"Authorization": f"Bearer {key}"} if key else {}), **headers, "Accept": MCP_ACCEPT}
    async with httpx2.AsyncClient(timeout=60) as client:
        init = await client.post(url + "/mcp", headers=h, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "iso", "version": "1"}}})
        seen = init.text + json.dumps(dict(init.headers))
        if init.status_code != 200:
            return str(init.status_code), seen
        sid = init.headers.get("mcp-session-id")
        if sid:
            h["mcp-session-id"] = sid
        version = _rpc_result(init.text).get("result", {}).get("protocolVersion")
        if version:
            h["mcp-protocol-version"] = version
        await client.post(url + "/mcp", headers=h, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        r = await client.post(url + "/mcp", headers=h, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": tool_args(w, tool, cell)}})
        seen += r.text + json.dumps(dict(r.headers))
        if r.status_code != 200:
            return str(r.status_code), seen
        result = _rpc_result(r.text).get("result") or {}
        if result.get("isError"):
            text = " ".join(c.get("text", "") for c in result.get("content") or [])
            code = text[text.find("[MN"):][:7] if "[MN" in text else "error"
            return code.strip("[]"), seen
        return "ok", seen


def _rpc_result(text: str) -> dict:
    """The JSON-RPC message of a response, plain JSON or server-sent events."""
    text = text.strip()
    if text.startswith("{"):
        return json.loads(text)
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip().startswith("{"):
            data = json.loads(line[5:])
            if "result" in data or "error" in data:
                return data
    return {}


# ------------------------------------------------------------------------ the matrix
def matrix(dsn: str) -> dict:
    w = setup(dsn)
    up = ScriptedUpstream(Reply(text="Scripted answer."))
    servers = [ServerThread(up.app).start()]
    up_url = servers[0].url
    config = Config(dsn=dsn, openai_base_url=up_url + "/v1", anthropic_base_url=up_url, db_timeout=2.0,
                    openai_api_key="sk-provider", anthropic_api_key="sk-provider")
    proxy = ServerThread(create_app(config)).start()
    mcp = ServerThread(http_app(build_server(dsn, Identity()))).start()
    servers += [proxy, mcp]
    # V's proxy session (X-Mnemo-Session names it), opened with V's key
    victim_session = str(uuid.uuid4())
    httpx2.post(proxy.url + "/v1/chat/completions", timeout=60,
                headers={"Authorization": f"Bearer {w.keys['own']}", "X-Mnemo-Session": victim_session},
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": f"remember {w.canary}"}]})
    endpoints = ["openai chat", "anthropic messages", "passthrough models", "api record_event", "api build_acb",
                 "api get_artifact", "api query_decisions"] + [f"mcp {name}" for name, _ in TOOLS]
    rows, leaks, mismatches, cells = [], [], [], 0
    try:
        before = fingerprint(dsn, w.victim)
        with httpx2.Client(timeout=60) as client:
            for endpoint in endpoints:
                row = {"endpoint": endpoint}
                for cell in CELLS:
                    want = expected(cell, endpoint)
                    if want is None:
                        row[cell] = "n/a"
                        continue
                    up.requests.clear()
                    if endpoint.startswith("mcp "):
                        got, seen = asyncio.run(mcp_call(mcp.url, w, endpoint[4:], cell))
                    else:
                        got, seen = proxy_call(client, proxy.url, w, endpoint, cell, victim_session)
                    cells += 1
                    row[cell] = got if got == want else f"{got}!={want}"
                    if got != want:
                        mismatches.append({"endpoint": endpoint, "cell": cell, "got": got, "expected": want,
                                           "body": seen[:300]})
                    if cell != "own key" and (w.canary in seen or w.canary in json.dumps(up.requests)):
                        leaks.append({"endpoint": endpoint, "cell": cell, "body": seen[:300]})
                    if cell not in ("own key", "no key", "revoked key", "expired key"):
                        after = fingerprint(dsn, w.victim)
                        if after != before:
                            leaks.append({"endpoint": endpoint, "cell": cell, "write": [before, after]})
                            before = after
                    elif cell == "own key":
                        before = fingerprint(dsn, w.victim)  # the owner's own writes
                rows.append(row)
    finally:
        for s in reversed(servers):
            s.stop()
    return {"endpoints": len(endpoints), "cells": cells, "leaks": len(leaks), "mismatches": len(mismatches),
            "leak_examples": leaks[:5], "mismatch_examples": mismatches[:10], "rows": rows,
            "passed": not leaks and not mismatches}


def print_rows(rows: list[dict]) -> None:
    short = {"no key": "none", "own key": "own", "other tenant's key": "other", "revoked key": "revoked",
             "expired key": "expired", "foreign tenant in body": "body", "foreign tenant in header": "header",
             "foreign session id": "session", "foreign artifact id": "artifact", "foreign memory id": "memory"}
    print(f"  {'endpoint':<28}" + "".join(f"{short[c]:>10}" for c in CELLS))
    for r in rows:
        print(f"  {r['endpoint']:<28}" + "".join(f"{r[c]:>10}" for c in CELLS))


def run(dsn: str, args) -> dict:
    figures = matrix(dsn)
    print_rows(figures.pop("rows"))
    print(f"http isolation: {figures['cells']} cells over {figures['endpoints']} endpoints: "
          f"{figures['leaks']} leaks, {figures['mismatches']} cells not as expected")
    for m in figures["mismatch_examples"]:
        print(f"  mismatch: {m}")
    for m in figures["leak_examples"]:
        print(f"  LEAK: {m}")
    return figures
