"""make bench-proxy: the transparent proxy's added latency (issue 23).

A scripted provider (mnemosyne.proxy.scripted, its own process) streams a reply of
PIECES pieces; `mnemo serve` (its own process) sits in front of it with the local
database. At 1, 8 and 32 concurrent clients, each client holds a conversation of its
own (a ~600-token system prompt, then turns of its questions and the replies, resent
whole on every call, as agents do) and streams ROUNDS calls, first straight to the
provider, then through the proxy with X-Mnemo-Bypass (the relay alone, no memory
work), then through the proxy: time to first byte and total, p50 and p95, and the
proxy's overhead (proxied minus direct, per percentile; the relay's beside it), and the median of each stage
the proxy reports in its Server-Timing header. Through the proxy every call
opens the session, records what is new, compiles the context (query embedding
included) and, after the response, records the reply. Errors are counted. The last
line is one JSON object, with the machine's load average before and after (the
figures mean little on a machine that other work keeps busy). Each run uses a tenant of
its own, so runs start from the same empty memory; --memory-tokens passes mnemo
serve's cap on the memory block.

    python bench/proxy.py [--rounds 12] [--levels 1,8,32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx2
import psycopg

from mnemosyne.client import default_dsn

PIECES = 16
SYSTEM = ("You are a coding agent working in a large repository. Follow the project's style guide, "
          "run the tests before you say you are done, and explain what you changed. ") * 20
QUESTIONS = ["Where is the retry logic for the HTTP client?", "Add a jitter to the backoff.",
             "Which tests cover the backoff?", "Run them and tell me what failed.",
             "Why does test_backoff_caps fail?", "Fix it without changing the public API.",
             "Now document the new parameter.", "Summarize what we changed today."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx2.get(url, timeout=2)
            return
        except httpx2.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def server_timing(value: str) -> dict[str, float]:
    """'mnemo-open;dur=1.2, mnemo-sync;dur=3.4' -> {'open': 1.2, 'sync': 3.4}"""
    out = {}
    for item in value.split(","):
        name, _, dur = item.strip().partition(";dur=")
        if name.startswith("mnemo-") and dur:
            out[name[6:]] = float(dur)
    return out


async def one_call(client: httpx2.AsyncClient, url: str, messages: list[dict], headers: dict,
                   stages: list[dict]) -> tuple[float, float, str]:
    start = time.perf_counter()
    ttfb, text = None, ""
    body = {"model": "gpt-4o", "stream": True, "messages": messages, "max_tokens": 1024}
    async with client.stream("POST", url, json=body, headers=headers) as r:
        if r.status_code != 200:
            await r.aread()
            raise RuntimeError(f"status {r.status_code}: {r.text[:200]}")
        if "server-timing" in r.headers:
            stages.append(server_timing(r.headers["server-timing"]))
        async for sse in httpx2.EventSource(r):
            if ttfb is None:
                ttfb = time.perf_counter() - start
            if sse.data.strip() == "[DONE]":
                break
            chunk = json.loads(sse.data)
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
            for c in chunk.get("choices") or []:
                text += (c.get("delta") or {}).get("content") or ""
    return ttfb or float("nan"), time.perf_counter() - start, text


async def run_level(url: str, clients: int, rounds: int, headers: dict, tag: str) -> dict:
    ttfb: list[float] = []
    total: list[float] = []
    errors: list[str] = []
    stages: list[dict] = []

    async def conversation(i: int) -> None:
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"[{tag} client {i}] {QUESTIONS[0]}"}]
        async with httpx2.AsyncClient(timeout=120) as client:
            for r in range(rounds):
                try:
                    t1, t2, text = await one_call(client, url, messages, headers, stages)
                    ttfb.append(t1)
                    total.append(t2)
                except (RuntimeError, ValueError, httpx2.HTTPError) as e:  # counted; the conversation goes on
                    errors.append(str(e)[:200])
                    text = "(error)"
                messages += [{"role": "assistant", "content": text},
                             {"role": "user", "content": QUESTIONS[(r + 1) % len(QUESTIONS)]}]

    started = time.perf_counter()
    await asyncio.gather(*(conversation(i) for i in range(clients)))
    return {"ttfb": ttfb, "total": total, "errors": errors, "stages": stages,
            "wall_s": time.perf_counter() - started}


def cpu_busy_s() -> float:
    """The machine's CPU time spent busy so far, in seconds, all cores together
    (/proc/stat: everything but idle and iowait; 0 where there is no /proc)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def timed_level(url: str, clients: int, rounds: int, headers: dict, tag: str) -> dict:
    """run_level, with the machine's CPU time per call while it ran (cpu_ms_per_call:
    the database's, the proxy's, the provider's and the clients' work, and anything
    else the machine runs meanwhile)."""
    busy = cpu_busy_s()
    run = asyncio.run(run_level(url, clients, rounds, headers, tag))
    run["cpu_ms_per_call"] = (cpu_busy_s() - busy) * 1000 / max(len(run["total"]), 1)
    return run


def summary(run: dict) -> dict:
    ms = 1000.0
    return {"ttfb_p50_ms": round(pct(run["ttfb"], 0.5) * ms, 1), "ttfb_p95_ms": round(pct(run["ttfb"], 0.95) * ms, 1),
            "total_p50_ms": round(pct(run["total"], 0.5) * ms, 1),
            "total_p95_ms": round(pct(run["total"], 0.95) * ms, 1),
            "calls": len(run["total"]), "errors": len(run["errors"]),
            "cpu_ms_per_call": round(run.get("cpu_ms_per_call", float("nan")), 1),
            # the proxy's own Server-Timing: median milliseconds per stage
            **{f"{k}_p50_ms": round(pct([st[k] for st in run["stages"] if k in st], 0.5), 1)
               for k in ("open", "sync", "compile") if run["stages"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12, help="calls per client at each level")
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--delay", type=float, default=0.002, help="seconds between the provider's pieces")
    parser.add_argument("--memory-tokens", type=int, help="mnemo serve --memory-tokens (default: none)")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    dsn = os.environ.get("DATABASE_URL") or default_dsn()
    run_id = uuid.uuid4().hex[:8]
    tenant = f"bench_proxy_{run_id}"  # a new tenant: runs start from the same (empty) memory
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT mnemo.create_tenant(%s)", (tenant,))

    py = sys.executable
    up_port, px_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    upstream = subprocess.Popen([py, "-m", "mnemosyne.proxy.scripted", "--port", str(up_port),
                                 "--pieces", str(PIECES), "--delay", str(args.delay),
                                 "--text", "Here is what I found in the repository, step by step. " * 4], env=env)
    proxy = subprocess.Popen([py, "-m", "mnemosyne.cli", "-d", dsn, "serve", "--port", str(px_port),
                              "--tenant", tenant, "--openai-base-url", f"http://127.0.0.1:{up_port}/v1",
                              "--db-pool", "8"]
                             + (["--memory-tokens", str(args.memory_tokens)] if args.memory_tokens else []),
                             env=env, stderr=subprocess.DEVNULL)
    results: dict = {"levels": {}, "loadavg_1m_before": round(os.getloadavg()[0], 2)}
    try:
        wait_http(f"http://127.0.0.1:{up_port}/v1/models")
        wait_http(f"http://127.0.0.1:{px_port}/v1/models")
        direct_url = f"http://127.0.0.1:{up_port}/v1/chat/completions"
        proxy_url = f"http://127.0.0.1:{px_port}/v1/chat/completions"
        headers = {"Authorization": "Bearer sk-bench"}
        # warm-up: every pooled connection compiles once (a backend's first compile
        # loads the encoder), and the provider's code paths run once
        asyncio.run(run_level(proxy_url, 8, 4, headers, f"warm-{run_id}"))
        asyncio.run(run_level(direct_url, 4, 2, headers, f"warm-{run_id}"))
        for n in levels:
            direct = summary(timed_level(direct_url, n, args.rounds, headers, f"d{n}-{run_id}"))
            # the relay alone: the proxy with X-Mnemo-Bypass, which does no memory work
            # (the HTTP hop, parsing and re-streaming): what any proxy in Python costs here
            relay = summary(timed_level(proxy_url, n, args.rounds, {**headers, "X-Mnemo-Bypass": "1"},
                                        f"b{n}-{run_id}"))
            proxied_run = timed_level(proxy_url, n, args.rounds, headers, f"p{n}-{run_id}")
            proxied = summary(proxied_run)
            keys = ("ttfb_p50_ms", "ttfb_p95_ms", "total_p50_ms", "total_p95_ms")
            overhead = {k.replace("_ms", "_overhead_ms"): round(proxied[k] - direct[k], 1) for k in keys}
            overhead.update({k.replace("_ms", "_relay_overhead_ms"): round(relay[k] - direct[k], 1) for k in keys})
            # The CPU a proxied call adds, and what that alone costs n calls that arrive
            # together on this machine's cores: the last of them waits for the others'
            # work (a floor for the p95 overhead at n clients, whatever the code's latency).
            extra = proxied["cpu_ms_per_call"] - direct["cpu_ms_per_call"]
            overhead["cpu_ms_per_call_added"] = round(extra, 1)
            overhead["cpu_floor_ms"] = round(extra * n / (os.cpu_count() or 1), 1)
            overhead["cpu_ms_per_call_added_by_relay"] = round(relay["cpu_ms_per_call"] - direct["cpu_ms_per_call"], 1)
            results["levels"][str(n)] = {"direct": direct, "relay": relay, "proxy": proxied, **overhead}
            print(f"[bench-proxy] {n:>2} clients: direct ttfb p50/p95 {direct['ttfb_p50_ms']}/"
                  f"{direct['ttfb_p95_ms']} ms, total {direct['total_p50_ms']}/{direct['total_p95_ms']} ms | "
                  f"proxy ttfb {proxied['ttfb_p50_ms']}/{proxied['ttfb_p95_ms']} ms, total "
                  f"{proxied['total_p50_ms']}/{proxied['total_p95_ms']} ms | overhead total p50/p95 "
                  f"{overhead['total_p50_overhead_ms']}/{overhead['total_p95_overhead_ms']} ms "
                  f"(open/sync/compile p50 {proxied.get('open_p50_ms')}/{proxied.get('sync_p50_ms')}/"
                  f"{proxied.get('compile_p50_ms')} ms), CPU per call +{overhead['cpu_ms_per_call_added']} ms "
                  f"(floor at {n} clients {overhead['cpu_floor_ms']} ms) | relay alone (bypass) overhead "
                  f"p50/p95 {overhead['total_p50_relay_overhead_ms']}/{overhead['total_p95_relay_overhead_ms']} ms, "
                  f"CPU +{overhead['cpu_ms_per_call_added_by_relay']} ms, "
                  f"errors {proxied['errors']}" + (f" ({proxied_run['errors'][0]})" if proxied_run["errors"] else ""),
                  flush=True)
    finally:
        for p in (proxy, upstream):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    at8 = results["levels"].get("8", {})
    at32 = results["levels"].get("32", {})
    results.update({
        "loadavg_1m_after": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
        "bench": "proxy", "tenant": tenant, "memory_tokens": args.memory_tokens, "rounds": args.rounds, "pieces": PIECES, "provider_delay_s": args.delay,
        "goal_p95_overhead_at_8_ms": 30,
        "p95_overhead_at_8_ms": at8.get("total_p95_overhead_ms"),
        "p95_relay_overhead_at_8_ms": at8.get("total_p95_relay_overhead_ms"),
        "errors_at_32": at32.get("proxy", {}).get("errors"),
        "goal_met": bool(at8 and at8["total_p95_overhead_ms"] <= 30 and at32 and at32["proxy"]["errors"] == 0),
    })
    print(json.dumps(results))


if __name__ == "__main__":
    main()
