"""Load part of bench-trust (issue 20): many clients, mixed operations, two scenarios.

  spread    args.clients clients, each on a tenant of its own (one session each)
  shared    args.clients clients on one tenant with 8 sessions (clients share them)

Each client opens its own connection and runs args.ops operations drawn (seeded) from
a mix of the API's writes and reads: record_message of every role (user, assistant,
system, developer, an assistant's tool call followed by its tool result), record_event
(decision, task_update, tool_call + tool_result, message), remember, forget (of a
memory the client remembered), compile_context and compile_context_bundle. Inputs
are all valid: any error is counted (goal 0). Then:
  drain       the job queue after the load: mnemo.run_jobs is called until no job of
              the scenario's tenants is queued (seconds; pg_cron's runner may help)
  rss_mb      a fresh backend's memory (/proc/<pg_backend_pid>/status; the server must
              run on this machine) after it embedded a text and compiled a context:
              VmRSS, and of it the private heap (RssAnon), mapped files (RssFile,
              shared between backends: the model's weights) and shared buffers
              (RssShmem, PostgreSQL's, not a backend's own); own = VmRSS less the
              shared buffers; private (smaps_rollup, Private_Clean + Private_Dirty):
              the pages this backend alone holds, what one more backend adds to the
              machine; Pss: private pages plus shared ones divided among the
              processes that map them. Measured after the first compile and again
              after 40 (a long-lived backend, past the switch to generic plans)
  cold_compile_ms  the first compile_context of a fresh connection, median of 5
              (Python imports, token counter vocabulary, model load), with the steps
              timed separately (count_tokens first: imports + vocabulary; then embed:
              the model; then a compile)
Prints one line per scenario; returns the figures and passed = (no errors).
"""

from __future__ import annotations

import random
import statistics
import threading
import time
import uuid

import psycopg
from psycopg.types.json import Jsonb

from .background import WaitSampler

SESSIONS_SHARED = 8
APP = "mnemo-trust-load"  # the clients' application_name, which the wait sampler follows
TOPICS = ["the invoice numbering scheme", "the staging database", "the quarterly billing export",
          "the PDF renderer upgrade", "the customer portal login", "the on-call rota",
          "the payment retries", "the search index rebuild"]
# operation -> weight in the mix
MIX = {"message_user": 14, "message_assistant": 10, "message_system": 2, "message_developer": 2,
       "message_tool_pair": 8, "event_decision": 5, "event_task": 4, "event_tool_pair": 4, "event_message": 3,
       "remember": 8, "forget": 3, "compile_context": 22, "compile_context_bundle": 15}


# an operation of the mix -> the API function it calls (the sampler's key)
_FUNCTION = {"event_decision": "record_event", "event_task": "record_event", "event_tool_pair": "record_event",
             "event_message": "record_event", **{k: "record_message" for k in MIX if k.startswith("message_")}}


def _percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))]


class Client(threading.Thread):
    def __init__(self, dsn: str, n: int, tenant: str, session: str, ops: int, seed: int, start: threading.Event):
        super().__init__(daemon=True)
        self.dsn, self.n, self.tenant, self.session, self.ops = dsn, n, tenant, session, ops
        self.rng = random.Random(seed)
        self.start_event = start
        self.times: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self.remembered: list[int] = []
        self.k = 0

    def text(self) -> str:
        self.k += 1
        topic = self.rng.choice(TOPICS)
        return (f"Client {self.n} note {self.k}: {topic} changed; the owner is "
                f"{self.rng.choice(['ann', 'bob', 'chen', 'dara'])} and it ships in week {self.rng.randint(1, 52)}.")

    def call(self, c, sql: str, args: tuple):
        return c.execute(sql, args).fetchone()[0]

    def msg(self, c, message: dict):
        return self.call(c, "SELECT mnemo.record_message(%s, %s, %s)", (self.tenant, self.session, Jsonb(message)))

    def event(self, c, kind: str, content: dict):
        return self.call(c, "SELECT mnemo.record_event(%s, %s, %s, %s)",
                         (self.tenant, self.session, kind, Jsonb(content)))

    def op(self, c, name: str) -> None:
        t = self.text()
        if name.startswith("message_") and name != "message_tool_pair":
            self.msg(c, {"role": name.removeprefix("message_"), "content": t})
        elif name == "message_tool_pair":
            call_id = f"call_{uuid.uuid4().hex[:16]}"
            self.msg(c, {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}]})
            self.msg(c, {"role": "tool", "tool_call_id": call_id, "content": "Result: " + t})
        elif name == "event_decision":
            self.event(c, "decision", {"decision": t, "rationale": ["it is simpler"], "alternatives": ["wait"]})
        elif name == "event_task":
            self.event(c, "task_update", {"title": t[:80], "status": self.rng.choice(["open", "doing", "done"])})
        elif name == "event_tool_pair":
            call_id = f"call_{uuid.uuid4().hex[:16]}"
            self.event(c, "tool_call", {"tool": "shell", "id": call_id, "arguments": {"cmd": "ls"}})
            self.event(c, "tool_result", {"tool": "shell", "tool_call_id": call_id, "text": "Output: " + t})
        elif name == "event_message":
            self.event(c, "message", {"text": t})
        elif name == "remember":
            self.remembered.append(self.call(c, "SELECT mnemo.remember(%s, %s, 'fact', %s)",
                                             (self.tenant, t, self.session)))
        elif name == "forget":
            if not self.remembered:
                return self.op(c, "remember")
            self.call(c, "SELECT mnemo.forget(%s, %s)", (self.tenant, self.remembered.pop(0)))
        elif name == "compile_context":
            self.call(c, "SELECT mnemo.compile_context(%s, %s, %s)",
                      (self.tenant, self.session, f"what changed in {self.rng.choice(TOPICS)}?"))
        elif name == "compile_context_bundle":
            self.call(c, "SELECT mnemo.compile_context_bundle(%s, %s, %s)",
                      (self.tenant, self.session, f"who owns {self.rng.choice(TOPICS)}?"))

    def run(self) -> None:
        names, weights = list(MIX), list(MIX.values())
        with psycopg.connect(self.dsn, autocommit=True, application_name=APP) as c:
            self.start_event.wait()
            for _ in range(self.ops):
                name = self.rng.choices(names, weights)[0]
                t0 = time.perf_counter()
                try:
                    self.op(c, name)
                except psycopg.Error as e:
                    self.errors.append(f"{name}: {e.sqlstate} {str(e).splitlines()[0][:200]}")
                    continue
                self.times.setdefault(name, []).append((time.perf_counter() - t0) * 1000)


def _drain(dsn: str, tenants: list[str], limit_s: float = 1800) -> dict:
    """Runs the job runner until no job of these tenants is queued."""
    with psycopg.connect(dsn, autocommit=True) as c:
        def queued() -> int:
            return c.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = ANY(%s) AND status = 'queued'",
                             (tenants,)).fetchone()[0]
        before = queued()
        t0 = time.monotonic()
        while queued() and time.monotonic() - t0 < limit_s:
            c.execute("CALL mnemo.run_jobs(64, 20, 5)")
        left = queued()
        failed = c.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = ANY(%s) AND status = 'failed'",
                           (tenants,)).fetchone()[0]
    return {"jobs_queued_after_load": before, "drain_s": round(time.monotonic() - t0, 1),
            "jobs_left": left, "jobs_failed": failed}


def scenario(dsn: str, name: str, clients: int, ops: int, seed: int) -> dict:
    run_id = uuid.uuid4().hex[:8]
    with psycopg.connect(dsn, autocommit=True) as c:
        if name == "spread":
            tenants = [f"load_{run_id}_{i:02d}" for i in range(clients)]
        else:
            tenants = [f"load_{run_id}_shared"]
        for t in tenants:
            c.execute("SELECT mnemo.create_tenant(%s)", (t,))
        sessions = {t: [c.execute("SELECT mnemo.start_session(%s)", (t,)).fetchone()[0]
                        for _ in range(1 if name == "spread" else SESSIONS_SHARED)] for t in tenants}
    start = threading.Event()
    threads = []
    for i in range(clients):
        t = tenants[i % len(tenants)]
        threads.append(Client(dsn, i, t, sessions[t][i % len(sessions[t])], ops, seed * 1000 + i, start))
    for th in threads:
        th.start()
    time.sleep(0.5)  # every client connected
    sampler = WaitSampler(dsn, APP)
    sampler.start()
    t0 = time.monotonic()
    start.set()
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    sampler.stop()
    times: dict[str, list[float]] = {}
    errors: list[str] = []
    for th in threads:
        errors += th.errors
        for k, v in th.times.items():
            times.setdefault(k, []).extend(v)
    n_ops = sum(len(v) for v in times.values()) + len(errors)
    out = {
        "clients": clients, "ops": n_ops, "errors": len(errors), "error_samples": sorted(set(errors))[:5],
        "wall_s": round(wall, 1), "ops_per_s": round(n_ops / wall, 1),
        "latency_ms": {k: {"n": len(v), "p50": round(_percentile(v, 50), 1), "p95": round(_percentile(v, 95), 1)}
                       for k, v in sorted(times.items())},
    }
    # what the slowest operations waited on (API function -> its top wait states)
    slowest = sorted(out["latency_ms"], key=lambda k: -out["latency_ms"][k]["p95"])[:3]
    out["waits"] = {fn: sampler.top(fn) for fn in {_FUNCTION.get(k, k) for k in slowest}}
    out.update(_drain(dsn, tenants))
    lat = out["latency_ms"]
    print(f"load {name}: {clients} clients x {ops} ops, {out['errors']} errors, {out['ops_per_s']} ops/s;"
          + "".join(f" {k} p50 {v['p50']} p95 {v['p95']};" for k, v in lat.items() if k.startswith("compile"))
          + f" drain {out['drain_s']} s ({out['jobs_queued_after_load']} jobs, {out['jobs_failed']} failed)",
          flush=True)
    for fn, waits in out["waits"].items():
        print(f"  {fn} waited on: " + ", ".join(f"{w} {share:.0%}" for w, share in waits), flush=True)
    return out


def _status(pid: int) -> dict | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            lines = f.read().splitlines()
    except OSError:
        return None  # the server is elsewhere
    keys = {"VmRSS", "RssAnon", "RssFile", "RssShmem"}
    out = {k: round(int(v.split()[0]) / 1024, 1) for k, _, v in (x.partition(":") for x in lines) if k in keys}
    out["own"] = round(out["VmRSS"] - out["RssShmem"], 1)
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            rollup = {k: int(v.split()[0]) / 1024 for k, _, v in (x.partition(":") for x in f) if v.strip()}
        out["Pss"] = round(rollup["Pss"], 1)
        out["private"] = round(rollup["Private_Clean"] + rollup["Private_Dirty"], 1)
    except (OSError, KeyError, ValueError):
        pass  # smaps_rollup needs Linux 4.14 and the right to read it
    return out


def backend_memory(dsn: str, tenant: str, session: str) -> dict:
    """A fresh backend's memory after it embedded a text and compiled a context."""
    with psycopg.connect(dsn, autocommit=True) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        fresh = _status(pid)
        c.execute("SELECT mnemo.embed('the staging database runs on port 6543')")
        embedded = _status(pid)
        query = "SELECT mnemo.compile_context(%s, %s, 'what changed in the staging database?')"
        c.execute(query, (tenant, session))
        compiled = _status(pid)
        for _ in range(39):
            c.execute(query, (tenant, session))
        return {"fresh": fresh, "after_embed": embedded, "after_compile": compiled, "after_40_compiles": _status(pid)}


def cold_compile(dsn: str, tenant: str, session: str, n: int = 5) -> dict:
    """The first compile_context of a fresh connection (median of n), and the steps
    of a fresh backend's first use, timed apart (median of n each)."""
    first, steps = [], {"count_tokens": [], "embed": [], "compile": []}
    q = "what changed in the staging database?"
    for _ in range(n):
        with psycopg.connect(dsn, autocommit=True) as c:
            t0 = time.perf_counter()
            c.execute("SELECT mnemo.compile_context(%s, %s, %s, '{\"log\": false}')", (tenant, session, q))
            first.append((time.perf_counter() - t0) * 1000)
        with psycopg.connect(dsn, autocommit=True) as c:
            for step, sql, args in (("count_tokens", "SELECT mnemo.count_tokens('hello')", ()),
                                    ("embed", "SELECT mnemo.embed('hello')", ()),
                                    ("compile", "SELECT mnemo.compile_context(%s, %s, %s, '{\"log\": false}')",
                                     (tenant, session, q))):
                t0 = time.perf_counter()
                c.execute(sql, args)
                steps[step].append((time.perf_counter() - t0) * 1000)
    return {"median_ms": round(statistics.median(first)), "runs_ms": [round(x) for x in first],
            "steps_median_ms": {k: round(statistics.median(v)) for k, v in steps.items()}}


def run(dsn: str, args) -> dict:
    clients, ops = getattr(args, "clients", 32), getattr(args, "ops", 300)
    out: dict = {"clients": clients, "ops_per_client": ops}
    for k, name in enumerate(("spread", "shared")):
        out[name] = scenario(dsn, name, clients, ops, seed=20 + k)
    with psycopg.connect(dsn, autocommit=True) as c:
        tenant = f"load_{uuid.uuid4().hex[:8]}_probe"
        c.execute("SELECT mnemo.create_tenant(%s)", (tenant,))
        session = c.execute("SELECT mnemo.start_session(%s)", (tenant,)).fetchone()[0]
        for i in range(20):
            c.execute("SELECT mnemo.record_message(%s, %s, %s)", (tenant, session, Jsonb(
                {"role": "user", "content": f"Turn {i}: {TOPICS[i % len(TOPICS)]} moved to plan {i}."})))
        c.execute("SELECT mnemo.remember(%s, 'The staging database runs on port 6543.', 'fact', %s)",
                  (tenant, session))
    _drain(dsn, [tenant])
    out["backend_rss_mb"] = backend_memory(dsn, tenant, session)
    out["cold_compile"] = cold_compile(dsn, tenant, session)
    for when in ("after_compile", "after_40_compiles"):
        rss = out["backend_rss_mb"][when] or {}
        print(f"load: backend {when.replace('_', ' ')}: VmRSS {rss.get('VmRSS')} MB (heap {rss.get('RssAnon')}, "
              f"mapped files {rss.get('RssFile')}, shared buffers {rss.get('RssShmem')}); own {rss.get('own')}, "
              f"private {rss.get('private')}, Pss {rss.get('Pss')}", flush=True)
    print(f"load: after the embed alone (the model loaded) {(out['backend_rss_mb']['after_embed'] or {}).get('VmRSS')}"
          " MB; cold compile median "
          f"{out['cold_compile']['median_ms']} ms, steps {out['cold_compile']['steps_median_ms']}", flush=True)
    out["errors"] = out["spread"]["errors"] + out["shared"]["errors"]
    out["passed"] = out["errors"] == 0 and out["spread"]["jobs_failed"] == 0 and out["shared"]["jobs_failed"] == 0
    return out
