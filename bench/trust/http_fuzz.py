"""HTTP fuzz (issue 40): hostile requests at every network surface, the servers real
(uvicorn on sockets) and the database real; the upstream LLM is the scripted one.

Kinds of request, drawn at random (seeded) over the endpoints of the proxy, its HTTP
API and MCP over HTTP: malformed JSON, JSON of the wrong shape or types, bad UTF-8,
huge bodies (over the cap), deeply nested bodies, odd and bad keys, odd headers, and
slow clients (a body trickled past the read deadline, or abandoned halfway).

Goals: no 5xx other than 503 (a stopped database), no traceback in any answer, and
one error shape per surface on every error: {"error": {"code", "message", "hint"}}
for the HTTP API, OpenAI's and Anthropic's for the proxy's model endpoints (and
what the provider answered, for errors that come from upstream), JSON-RPC for MCP.

``run(dsn, args)``: --http-fuzz-requests (default 20000).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter, deque

import httpx2

from mnemosyne import connect
from mnemosyne.mcp_server import Identity, build_server, http_app
from mnemosyne.proxy import Config, create_app
from mnemosyne.proxy.scripted import Reply, ScriptedUpstream, ServerThread

MAX_BODY = 256 * 1024  # the servers' cap in this run (413 above it)
BODY_TIMEOUT = 1.5  # seconds to receive a body (408 after)
CONCURRENCY = 16

ENDPOINTS = [("POST", "/v1/chat/completions"), ("POST", "/v1/messages"), ("GET", "/v1/models"),
             ("POST", "/mnemo/v1/record_event"), ("POST", "/mnemo/v1/build_acb"),
             ("POST", "/mnemo/v1/get_artifact"), ("POST", "/mnemo/v1/query_decisions"),
             ("POST", "/mnemo/v1/nonsense"), ("POST", "/mcp")]
WEIRD = [None, True, False, 0, -1, 2**63, 1e308, -0.5, "", "x", "\u0000", "é🙂", "../../etc", [], {}, [1, "a"],
         {"a": {"b": None}}, "9" * 40, "mnk_" + "0" * 12 + "_" + "0" * 64]


def weird(rng: random.Random):
    return rng.choice(WEIRD)


def chat_body(rng: random.Random, anthropic: bool) -> dict:
    body: dict = {"model": rng.choice(["gpt-4o", "claude-x", weird(rng)]),
                  "messages": [{"role": "user", "content": "hello " + str(rng.random())}]}
    if anthropic:
        body["max_tokens"] = rng.choice([10, 0, -5, "a", None, 10**12])
    for k in rng.sample(["messages", "model", "stream", "stream_options", "n", "max_tokens", "tools",
                         "tool_choice", "max_completion_tokens", "system", "temperature"], rng.randint(0, 4)):
        body[k] = weird(rng)
    if rng.random() < 0.3:
        body["messages"] = [rng.choice([{"role": weird(rng), "content": weird(rng)}, weird(rng),
                                        {"role": "user", "content": [{"type": weird(rng), "text": weird(rng)}]},
                                        {"role": "tool", "tool_call_id": weird(rng), "content": "x"},
                                        {"role": "assistant", "tool_calls": weird(rng)}])
                            for _ in range(rng.randint(0, 3))]
    return body


def api_body(rng: random.Random, name: str) -> dict:
    fields = {"record_event": ["kind", "content", "actor", "sensitivity", "tags", "refs"],
              "build_acb": ["query_text", "max_tokens", "intent"], "get_artifact": ["artifact_id"],
              "query_decisions": ["query", "limit", "include_superseded"]}.get(name, ["x"])
    fields += ["tenant_id", "session_id", "agent_id", "channel"]
    body = {k: weird(rng) for k in rng.sample(fields, rng.randint(0, len(fields)))}
    if name == "record_event" and rng.random() < 0.5:
        body.update(kind=rng.choice(["message", "decision", "tool_result", "artifact", "x"]),
                    content=rng.choice([{"text": "hi"}, {"decision": "d", "rationale": weird(rng)}, weird(rng)]))
    if name == "get_artifact" and rng.random() < 0.5:
        body["artifact_id"] = rng.choice(["abc", "art_", "art_12", "art_-1", "1e3", " 7", "art_9" * 30])
    if rng.random() < 0.3:
        body["session_id"] = rng.choice(["s1", "not-a-uuid", "00000000-0000-0000-0000-000000000000", "x" * 600])
    return body


def mcp_body(rng: random.Random) -> dict | list:
    method = rng.choice(["initialize", "tools/list", "tools/call", "nonsense", weird(rng)])
    params = rng.choice([weird(rng), {"name": rng.choice(["memory_stats", "memory_record_event", "nope"]),
                                      "arguments": {"kind": weird(rng), "content": weird(rng),
                                                    "tenant_id": weird(rng)}}])
    body = {"jsonrpc": rng.choice(["2.0", "1.0", weird(rng)]), "id": weird(rng), "method": method,
            "params": params}
    return [body, body] if rng.random() < 0.1 else body


def deep(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth if depth % 2 else b"[" * depth + b"]" * depth


def draw(rng: random.Random, key: str) -> tuple[str, str, str, dict, bytes]:
    """(kind, method, path, headers, body) of one hostile request."""
    method, path = rng.choice(ENDPOINTS)
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json",
               "Accept": "application/json, text/event-stream"}
    if path == "/v1/messages":
        headers["anthropic-version"] = "2023-06-01"
    kind = rng.choice(["wrong types", "wrong types", "wrong types", "malformed json", "bad utf-8", "huge",
                       "deep", "keys", "headers"])
    if path == "/mcp":
        good = mcp_body(rng)
    elif path.startswith("/mnemo/"):
        good = api_body(rng, path.rsplit("/", 1)[1])
    else:
        good = chat_body(rng, path == "/v1/messages")
    body = json.dumps(good).encode()
    if kind == "malformed json":
        body = rng.choice([body[: rng.randint(0, max(len(body) - 1, 0))], b"{", b"nul", b"[1,]", b'{"a":1}}',
                           b"\x00\x01\x02", b"", b"   ", b"{'single': 'quotes'}", b"NaN", b"1e99999"])
    elif kind == "bad utf-8":
        body = body.replace(b"hello", b"hel\xff\xfelo") if b"hello" in body else b'{"text": "\xc3\x28\xa0\xa1"}'
        if rng.random() < 0.5:
            body = b'{"kind": "message", "content": {"text": "\xed\xa0\x80"}, "x": "\xf8\x88\x80\x80\x80"}'
    elif kind == "huge":
        body = b'{"messages": [{"role": "user", "content": "' + b"x" * (MAX_BODY + rng.randint(1, 4096)) + b'"}]}'
        if rng.random() < 0.5:
            headers["content-length-lie"] = "1"
    elif kind == "deep":
        body = deep(rng.choice([100, 1000, 5000, 20000, 100001]))
    elif kind == "keys":
        headers["Authorization"] = rng.choice(["Bearer", "Bearer mnk_", "Basic abc", "Bearer " + "mnk_" * 300,
                                               f"Bearer {key}x", "bearer " + key, "Bearer mnk_\u00e9"])
        if rng.random() < 0.3:
            headers.pop("Authorization")
            headers["x-api-key"] = rng.choice([key, "mnk_x", "", "sk-provider-key"])
    elif kind == "headers":
        headers.update(rng.choice([{"X-Mnemo-Tenant": "someone_else"}, {"X-Mnemo-Session": "x" * 2000},
                                   {"X-Mnemo-Context-Window": rng.choice(["-1", "0", "1", "abc", "9" * 30])},
                                   {"X-Mnemo-Bypass": "1"}, {"content-type": "text/plain"},
                                   {"X-Mnemo-Agent": "\u00e9" * 300}, {"X-Mnemo-Channel": "nope"}]))
    return kind, method, path, headers, body


def shape_ok(path: str, status: int, text: str, headers: dict) -> bool:
    """Whether an error answer has its surface's one shape."""
    try:
        data = json.loads(text)
    except ValueError:
        return False
    if path.startswith("/mnemo/"):
        return isinstance(data, dict) and set(data) == {"error"} and isinstance(data["error"], dict) \
            and set(data["error"]) == {"code", "message", "hint"}
    if path == "/mcp":
        return isinstance(data, dict) and isinstance(data.get("error"), dict) and "message" in data["error"]
    if path.startswith("/v1/messages"):
        return isinstance(data, dict) and data.get("type") == "error" and isinstance(data.get("error"), dict) \
            and {"type", "message"} <= set(data["error"])
    return isinstance(data, dict) and isinstance(data.get("error"), dict) and "message" in data["error"]


async def slow_client(port: int, path: str, key: str, abandon: bool) -> tuple[int | None, str]:
    """Sends headers and half a body, then waits past the read deadline (or leaves)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b'{"kind": "message", "content": {"text": "slow"}}'
    writer.write((f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                  f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body[:10])
    await writer.drain()
    if abandon:
        writer.close()
        return None, ""
    data = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), BODY_TIMEOUT + 5):  # to the close
            data += chunk
    finally:
        writer.close()
    text = data.decode("latin-1")
    status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/") else None
    return status, text.split("\r\n\r\n", 1)[-1]


async def fuzz(urls: dict[str, str], key: str, n: int, seed: int) -> dict:
    statuses: Counter = Counter()
    kinds: Counter = Counter()
    retried: Counter = Counter()
    bad: list[dict] = []
    sem = asyncio.Semaphore(CONCURRENCY)
    done = 0
    t0 = time.monotonic()

    async def one(client: httpx2.AsyncClient, i: int) -> None:
        nonlocal done
        kind, method, path, headers, body = draw(random.Random(seed * 1_000_003 + i), key)
        url = (urls["mcp"] if path == "/mcp" else urls["proxy"]) + path
        async with sem:
            status, text, rh = 0, "", {}
            for attempt in range(2):  # a kept-alive connection the server closed meanwhile: once more
                try:
                    r = await client.request(method, url, headers={k: v.encode() for k, v in headers.items()},
                                             content=body if method == "POST" else None)
                    status, text, rh = r.status_code, r.text, dict(r.headers)
                    break
                except (httpx2.ReadError, httpx2.RemoteProtocolError, httpx2.WriteError) as e:
                    retried[type(e).__name__] += 1
                    status, text, rh = 0, f"{type(e).__name__}: {e}", {}
                except httpx2.HTTPError as e:
                    status, text, rh = 0, f"{type(e).__name__}: {e}", {}
                    break
        done += 1
        kinds[kind] += 1
        statuses[status] += 1
        problem = None
        if status == 0 or (status >= 500 and status != 503):
            problem = "5xx" if status else "no answer"
        elif "Traceback" in text or 'File "/' in text:
            problem = "traceback"
        elif status >= 400 and not shape_ok(path, status, text, rh):
            problem = "shape"
        if problem:
            bad.append({"problem": problem, "kind": kind, "path": path, "status": status, "answer": text[:300],
                        "body": body[:200].decode("utf-8", "replace")})
        if done % 2000 == 0:
            print(f"  {done:>6} requests  {time.monotonic() - t0:6.0f} s  statuses {dict(statuses)}  "
                  f"problems {len(bad)}", flush=True)

    limits = httpx2.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx2.AsyncClient(timeout=120, limits=limits) as client:
        await asyncio.gather(*(one(client, i) for i in range(n)))
    # slow clients: a body that stops halfway gets 408 in the surface's shape; one that
    # leaves is let go (nothing to answer)
    slow = Counter()
    port = int(urls["proxy"].rsplit(":", 1)[1])
    for abandon in (False, True, False, True):
        for path in ("/mnemo/v1/record_event", "/v1/chat/completions"):
            status, text = await slow_client(port, path, key, abandon)
            slow[str(status)] += 1
            if not abandon and (status != 408 or not shape_ok(path, 408, text, {})):
                bad.append({"problem": "slow client", "path": path, "status": status, "answer": text[:300]})
    return {"requests": done + sum(slow.values()), "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "kinds": dict(kinds), "slow_clients": dict(slow), "retried": dict(retried), "problems": len(bad),
            "problem_kinds": {f"{p} {path} {s}": c for (p, path, s), c in Counter(
                (b["problem"], b.get("path"), b.get("status")) for b in bad).most_common(20)},
            "examples": bad[:8], "seconds": round(time.monotonic() - t0, 1)}


def run(dsn: str, args) -> dict:
    n = getattr(args, "http_fuzz_requests", 20_000)
    tenant = "httpfuzz_" + hex(random.getrandbits(32))[2:]
    with connect(dsn) as db:
        db.create_tenant(tenant, config={"formation": {"method": "off"}})
        key = db.create_api_key(tenant, "http fuzz")["secret"]
    up = ScriptedUpstream(Reply(text="Scripted answer."))
    up.requests = deque(maxlen=16)  # type: ignore[assignment]  # a long run keeps only the last
    servers = [ServerThread(up.app).start()]
    config = Config(dsn=dsn, openai_base_url=servers[0].url + "/v1", anthropic_base_url=servers[0].url,
                    db_timeout=5.0, openai_api_key="sk-provider", anthropic_api_key="sk-provider",
                    max_body_bytes=MAX_BODY, max_concurrent=CONCURRENCY * 2)
    app = create_app(config)
    app.body_timeout = BODY_TIMEOUT
    mcp_app = http_app(build_server(dsn, Identity()), max_body_bytes=MAX_BODY, body_timeout=BODY_TIMEOUT)
    servers += [ServerThread(app).start(), ServerThread(mcp_app).start()]
    try:
        figures = asyncio.run(fuzz({"proxy": servers[1].url, "mcp": servers[2].url}, key, n,
                                   getattr(args, "seed", 40)))
    finally:
        for s in reversed(servers):
            s.stop()
        with connect(dsn) as db:
            db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'", {"t": tenant})
    print(f"http fuzz: {figures['requests']} requests in {figures['seconds']} s: statuses {figures['statuses']}, "
          f"slow clients {figures['slow_clients']}, {figures['problems']} problems")
    for k, c in figures["problem_kinds"].items():
        print(f"  {c:>6}  {k}")
    for e in figures["examples"]:
        print(f"  example: {e}")
    figures["passed"] = figures["problems"] == 0
    return figures


if __name__ == "__main__":  # a quick run: python bench/trust/http_fuzz.py [N]
    import sys

    from mnemosyne import default_dsn

    class A:
        http_fuzz_requests = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    run(default_dsn(), A())
