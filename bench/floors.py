"""Floors under issue 43's goals (make bench-floors): what the parts a managed call or
an ingest cannot avoid cost on this machine, each measured beside its reference in
the same run (the machine is shared and noisy: ratios, not absolute figures).

--parts ingest: the write path against the issue's raw INSERT, one connection, a
  statement per message and a statement per --batch turns, interleaved in rounds.
  ``raw`` is the issue's reference (the same JSON row into a logged table with a
  primary key); ``messages`` is a plain INSERT of the same message's columns straight
  into mnemo.messages (its partitions, indexes, generated tsvector, trigger, and
  row-level security: as mnemo_api_owner with the tenant set, as the API functions
  run), no API function; ``copy`` is a plain (unpartitioned) table built LIKE
  mnemo.messages with the same indexes and trigger, and ``copy-<x>`` the same without
  one of them (an index, the trigger, the generated tsvector with its GIN index), so
  each one's cost is the difference; ``copy-pk`` keeps only the primary key.
  ``record_message`` / ``record_messages`` are the API (a call per message, per turn,
  per --batch turns). If ``messages`` alone is below 0.5 x raw (0.8 x batched), the
  ingest goal cannot be met while the table keeps what the compile reads.
--parts call: PostgreSQL's work for one managed call, no proxy: the SQL calls the
  proxy makes (open_session, sync_messages of the whole resent conversation, the
  compile in a savepoint, in one transaction; then the reply's sync_messages), on one
  backend, over a session with --history messages of a LoCoMo conversation already
  recorded and embedded (every other call names its query, the same user message, so
  the compile hands no vector to the message's embed job: the two kinds of call
  are shown apart); then the jobs the call queued, on a backend of its own with
  pg_cron's runner paused: the embed jobs (one process_job_batch, as a runner's round
  starts), then the rest (CALL mnemo.run_jobs: extraction); and the encoder alone on a third
  backend (mnemo.embed of the new user message, mnemo.embed_batch of the call's two
  texts). CPU is each backend's /proc/<pid>/schedstat (time on a CPU, ns).
--parts relay: the CPU of relaying one streamed reply (--pieces SSE events at
  --tokens-per-s) from the scripted provider to a client: `mnemo serve` with
  X-Mnemo-Bypass (the project's HTTP stack: httpx2 to the upstream, Starlette and
  uvicorn to the client), a bare asyncio relay that copies bytes, and a bare asyncio
  relay that also splits the SSE events and decodes each one's JSON (what a managed
  relay must at least do to record the reply); the scripted provider's own CPU for the
  same pieces is shown beside. /proc/<pid>/stat of each process, --calls calls per
  relay at --concurrency at a time, the relays in rotating rounds.

Ends with one JSON line. Needs the database on this machine (its /proc).

    python bench/floors.py [--parts ingest,call,relay] [--messages 600] [--calls 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from mnemosyne import default_dsn
from mnemosyne.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conversations import shared_data
from ingest import corpus, runner_idle
from locomo import jobs_paused, pct

DSN = default_dsn()
RAW = "public.bench_floors_raw"
COPY = "public.bench_floors_copy"
GOALS = {"ingest_one": 0.5, "ingest_batch": 0.8, "cpu_ms": 20.0}


def schedstat_ns(pid: int) -> int:
    """Time a process's threads have spent on a CPU (ns), from their
    /proc/<pid>/task/<tid>/schedstat: a backend encodes a compile's query on a thread
    of its own, which the process's own schedstat (its main thread's) leaves out.
    The backends' threads live as long as they do."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads, exited ones included), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backend(autocommit: bool = True) -> tuple[psycopg.Connection, int]:
    conn = psycopg.connect(DSN, autocommit=autocommit)
    return conn, conn.execute("SELECT pg_backend_pid()").fetchone()[0]


# ------------------------------------------------------------------------ ingest

def secondary_indexes(conn: psycopg.Connection) -> dict[str, str]:
    """mnemo.messages' indexes other than its primary key: short name -> definition
    (ON ONLY mnemo.messages, to be pointed at the copy)."""
    out = {}
    for name, definition in conn.execute(
            "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
            " WHERE x.indrelid = 'mnemo.messages'::regclass AND NOT x.indisprimary ORDER BY 1").fetchall():
        out[name.removeprefix("messages_").removesuffix("_idx")] = definition
    return out


def build_copy(conn: psycopg.Connection, table: str, indexes: dict[str, str], without: str | None) -> None:
    """A plain table LIKE mnemo.messages: its columns, defaults, checks and generated
    tsvector, primary key, the given secondary indexes and the line_tokens trigger,
    less `without` (an index name, 'trigger', 'tsvector': the generated column and
    its GIN index, or 'all': everything but the primary key)."""
    generated = without not in ("tsvector", "all")
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (LIKE mnemo.messages INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
                 f"{' INCLUDING GENERATED' if generated else ''})")
    if not generated:
        conn.execute(f"ALTER TABLE {table} DROP COLUMN search_tsv")
    conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (tenant_id, message_id, created_at)")
    for name, definition in indexes.items():
        if without in (name, "all") or (without == "tsvector" and "search_tsv" in definition):
            continue
        conn.execute(definition.replace("CREATE INDEX " + "messages_" + name, f"CREATE INDEX {table.split('.')[1]}_{name}"
                                        ).replace("ON ONLY mnemo.messages", f"ON {table}"))
    if without not in ("trigger", "all"):
        conn.execute(f"CREATE TRIGGER line_tokens BEFORE INSERT OR UPDATE OF content ON {table}"
                     " FOR EACH ROW EXECUTE FUNCTION mnemo_internal.messages_line_tokens()")
    conn.execute(f"GRANT INSERT, SELECT ON {table} TO mnemo_api_owner")


def message_row(tenant: str, sid: uuid.UUID, turn: int, m: dict) -> tuple:
    """The columns record_messages fills for a message, as the client can make them
    (the token count a cheap estimate: the floor is the table's, not the counter's)."""
    content = m.get("content")
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    calls = m.get("tool_calls")
    text = (content or "") + (json.dumps(calls) if calls else "")
    return (tenant, sid, turn, m["role"], content, m.get("name"), Jsonb(calls) if calls else None,
            m.get("tool_call_id"), max(1, len(text) // 4), hashlib.sha256(text.encode()).digest(),
            max(1, len(content or "") // 4))


# line_tokens given, as record_messages gives it (counted with the token count): the
# trigger then only checks it
COLUMNS = ("tenant_id, session_id, turn_index, role, content, name, tool_calls, tool_call_id, token_count,"
           " content_hash, line_tokens")


class IngestRun:
    """One connection per kind of writer; each variant writes the next turns of its own
    session, the variants in rotating rounds, so that the load hits them alike."""

    def __init__(self, tenant: str, sessions: list, batch: int, copies: list[str]):
        self.tenant, self.sessions, self.batch = tenant, sessions, batch
        self.api = psycopg.connect(DSN, autocommit=True)  # as the API is called (superuser here)
        self.owner = psycopg.connect(DSN, autocommit=True)  # plain INSERTs, as the API functions run
        self.owner.execute("SET ROLE mnemo_api_owner")
        self.owner.execute("SELECT set_config('mnemo.tenant_id', %s, false)", (tenant,))
        self.copies = copies
        self.cursor: dict[str, tuple] = {}
        self.next_session = 0
        self.turn_of: dict[uuid.UUID, int] = {}
        self.stats: dict[str, list] = {}  # variant -> [messages, seconds, per-message latencies]
        self.bare_sessions: list[uuid.UUID] = []

    def _session(self, variant: str) -> tuple:
        sid, turns, at = self.cursor.get(variant, (None, [], 0))
        if at >= len(turns):
            turns = self.sessions[self.next_session % len(self.sessions)]
            self.next_session += 1
            if variant.startswith("record_"):
                sid = self.api.execute("SELECT mnemo.start_session(%s, p_agent_id => 'bench-floors')",
                                       (self.tenant,)).fetchone()[0]
            else:
                sid = uuid.uuid4()
                if variant.startswith("messages"):
                    self.bare_sessions.append(sid)
            self.turn_of[sid] = 0
            at = 0
        return sid, turns, at

    def _timed(self, variant: str, n: int, conn: psycopg.Connection, sql: str, params) -> None:
        t0 = time.perf_counter()
        conn.execute(sql, params)
        dt = time.perf_counter() - t0
        s = self.stats.setdefault(variant, [0, 0.0, []])
        s[0] += n
        s[1] += dt
        s[2].extend([dt / n] * n)

    def write(self, variant: str, n_turns: int) -> None:
        batched = variant.endswith("/batch")
        base = variant.removesuffix("/batch")
        step = self.batch if batched else 1
        for _ in range(0, n_turns, step):
            sid, turns, at = self._session(variant)
            msgs = [m for t in turns[at:at + step] for m in t]
            self.cursor[variant] = (sid, turns, at + step)
            first = self.turn_of[sid]
            self.turn_of[sid] += len(msgs)
            if base == "record_message":
                for m in msgs:
                    self._timed(variant, 1, self.api, "SELECT mnemo.record_message(%s, %s, %s)",
                                (self.tenant, sid, Jsonb(m)))
                continue
            if base == "record_messages":
                self._timed(variant, len(msgs), self.api, "SELECT mnemo.record_messages(%s, %s, %s::jsonb[])",
                            (self.tenant, sid, [Jsonb(m) for m in msgs]))
                continue
            if base == "raw":
                rows = [(self.tenant, sid, first + i, Jsonb(m)) for i, m in enumerate(msgs)]
                conn, table, sql_one = self.api, RAW, f"INSERT INTO {RAW} VALUES (%s, %s, %s, %s)"
                sql_many = (f"INSERT INTO {RAW} SELECT %s, %s, %s + t.i - 1, t.m"
                            " FROM unnest(%s::jsonb[]) WITH ORDINALITY AS t (m, i)")
                many_args = (self.tenant, sid, first, [r[3] for r in rows])
            else:
                table = {"messages": "mnemo.messages", "copy": f"{COPY}_none", "copy-pk": f"{COPY}_all"}.get(
                    base, f"{COPY}_{base.removeprefix('copy-')}")
                conn = self.owner
                rows = [message_row(self.tenant, sid, first + i, m) for i, m in enumerate(msgs)]
                sql_one = f"INSERT INTO {table} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                sql_many = (f"INSERT INTO {table} ({COLUMNS}) SELECT %s, %s, %s + t.i - 1, t.role, t.content,"
                            " t.name, t.calls, t.call_id, t.tokens, t.hash, t.lines FROM unnest(%s::text[], %s::text[],"
                            " %s::text[], %s::jsonb[], %s::text[], %s::int[], %s::bytea[], %s::int[])"
                            " WITH ORDINALITY AS t (role, content, name, calls, call_id, tokens, hash, lines, i)")
                many_args = (self.tenant, sid, first, *[list(c) for c in zip(*[r[3:] for r in rows])])
            if batched:
                self._timed(variant, len(rows), conn, sql_many, many_args)
            else:
                for r in rows:
                    self._timed(variant, 1, conn, sql_one, r)

    def close(self) -> None:
        self.api.close()
        self.owner.close()


def ingest_part(args, conn: psycopg.Connection, tenant: str) -> dict:
    sessions = corpus()
    indexes = secondary_indexes(conn)
    copies = ["none", *indexes, "tsvector", "trigger", "all"]  # what each copy goes without
    conn.execute(f"DROP TABLE IF EXISTS {RAW}")
    conn.execute(f"CREATE TABLE {RAW} (tenant_id text, session_id uuid, turn_index integer,"
                 " message jsonb NOT NULL, PRIMARY KEY (tenant_id, session_id, turn_index))")
    for c in copies:
        build_copy(conn, f"{COPY}_{c}", indexes, None if c == "none" else c)
    names = {"none": "copy", "all": "copy-pk", **{c: f"copy-{c}" for c in copies if c not in ("none", "all")}}
    singles = ["raw", "messages", "record_message", "record_messages",
               *[names[c] for c in copies]]
    batched = [f"{v}/batch" for v in ["raw", "messages", "record_messages", *[names[c] for c in copies]]]
    variants = singles + batched
    run = IngestRun(tenant, sessions, args.batch, copies)
    per_turn = sum(len(t) for s in sessions for t in s) / sum(len(s) for s in sessions)
    rounds = max(1, round(args.messages / (args.turns_per_round * per_turn)))
    try:
        for r in range(rounds):
            for v in variants[r % len(variants):] + variants[:r % len(variants)]:
                run.write(v, args.turns_per_round)
    finally:
        run.close()
        # the bare rows have no jobs, levels or paging: they go; the API's stay, as bench-ingest's do
        conn.execute("DELETE FROM mnemo.messages WHERE tenant_id = %s AND session_id = ANY (%s)",
                     (tenant, run.bare_sessions))
        conn.execute("DELETE FROM mnemo.jobs WHERE tenant_id = %s AND status = 'queued'", (tenant,))
        conn.execute(f"DROP TABLE IF EXISTS {RAW}")
        for c in copies:
            conn.execute(f"DROP TABLE IF EXISTS {COPY}_{c}")
    out = {}
    for v in variants:
        n, secs, lat = run.stats[v]
        out[v] = {"messages": n, "per_s": round(n / secs, 1), "p50_ms": round(1000 * statistics.median(lat), 3),
                  "p95_ms": round(1000 * pct(lat, 0.95), 3)}
    for v in variants:
        ref = out["raw/batch" if v.endswith("/batch") else "raw"]["per_s"]
        out[v]["to_raw"] = round(out[v]["per_s"] / ref, 3)
        out[v]["to_raw_one"] = round(out[v]["per_s"] / out["raw"]["per_s"], 3)
    print(f"\ningest, one connection, {rounds} rounds of {args.turns_per_round} turns a variant"
          f" ({args.batch} turns a batched statement):")
    print(f"  {'variant':30} {'msgs':>6} {'msg/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'/ raw':>7} {'/ raw 1':>8}")
    for v in variants:
        o = out[v]
        print(f"  {v:30} {o['messages']:6} {o['per_s']:9.1f} {o['p50_ms']:8.3f} {o['p95_ms']:8.3f}"
              f" {o['to_raw']:7.3f} {o['to_raw_one']:8.3f}")
    # each index's, the trigger's, the tsvector's cost: per message, against the whole copy
    costs = {}
    for mode in ("", "/batch"):
        full = 1000 / out[f"copy{mode}"]["per_s"]
        costs[mode or "/one"] = {names[c]: round(full - 1000 / out[f"{names[c]}{mode}"]["per_s"], 4)
                                 for c in copies if c != "none"}
    print("  ms a message each part costs (the whole copy less the copy without it):")
    for mode, c in costs.items():
        print(f"    {mode:7} " + ", ".join(f"{k.removeprefix('copy-')} {v:+.3f}" for k, v in c.items()))
    out["costs_ms"] = costs
    out["rounds"] = rounds
    return out


# ------------------------------------------------------------------------ call

def locomo_messages() -> list[dict]:
    """LoCoMo's first conversation as chat messages, speakers alternating user and
    assistant turns by position (the proxy's messages carry no names)."""
    path = os.environ.get("LOCOMO_JSON") or shared_data("bench", "locomo", "locomo10.json")
    if not path:
        sys.exit("LoCoMo (shared/bench/locomo/locomo10.json) is missing")
    conv = json.loads(Path(path).read_text())[0]["conversation"]
    keys = sorted((k for k in conv if k.startswith("session_") and isinstance(conv[k], list)),
                  key=lambda k: int(k.split("_")[1]))
    texts = [t["text"] for k in keys for t in conv[k]]
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]


SYSTEM = ("You are a helpful companion. Remember what the user tells you about their life, "
          "their friends and their plans, and answer from it. ") * 15


class Laps:
    """lap(name): a backend's CPU (ms) since the last lap, into laps[name]."""

    def __init__(self, pid: int, laps: dict[str, float]):
        self.pid, self.laps, self.t = pid, laps, schedstat_ns(pid)

    def __call__(self, name: str) -> None:
        now = schedstat_ns(self.pid)
        self.laps[name] = (now - self.t) / 1e6
        self.t = now


def call_part(args, conn: psycopg.Connection, tenant: str) -> dict:
    convo = locomo_messages()
    need = args.history + 2 * (args.calls + args.warmup)
    if len(convo) < need:
        sys.exit(f"--history {args.history} with {args.calls + args.warmup} calls needs {need} messages;"
                 f" the conversation has {len(convo)}")
    proxy_conn, proxy_pid = backend()
    runner_conn, runner_pid = backend()
    enc_conn, enc_pid = backend()
    db = Client(proxy_conn)
    key = f"floors-{uuid.uuid4().hex[:8]}"
    head = [{"role": "system", "content": SYSTEM}]
    history = convo[:args.history]
    options = {"tool_tokens": 0, "phantom_tools": False}
    # the history recorded and settled, as after earlier calls: embedded, segments sealed
    sid = db.open_session(tenant, key, model="gpt-4o", context_window=128000, response_reserve=4096,
                          system_prompt=SYSTEM, metadata={"source": "proxy"})
    db.sync_messages(tenant, sid, head + history, metadata={"source": "proxy"})
    runner_conn.execute("CALL mnemo.run_jobs(p_max_seconds => 0)")
    runner_conn.execute("CALL mnemo.run_sweep('segments')")
    enc_conn.execute("SELECT mnemo.embed('warm the encoder')")
    rows = []
    at = args.history
    for i in range(args.warmup + args.calls):
        # ABBA: a call's place (odd or even) costs by itself (~3-4 ms of compile here),
        # so each kind of call takes as many of both
        hand_over = i % 4 in (0, 3)
        user, reply = convo[at], {**convo[at + 1], "role": "assistant"}
        at += 2
        messages = head + history + [user]
        laps: dict[str, float] = {}
        lap = Laps(proxy_pid, laps)

        with proxy_conn.transaction():
            db.open_session(tenant, key, model="gpt-4o", context_window=128000, response_reserve=4096,
                            system_prompt=SYSTEM, metadata={"source": "proxy"})
            lap("open")
            synced = db.sync_messages(tenant, sid, messages, metadata={"source": "proxy"})
            lap("sync")
            with proxy_conn.transaction():
                # every other call names its query (the same text): no vector handed to the job
                bundle = db.compile_context_bundle(tenant, sid, None if hand_over else user["content"], **options)
            lap("compile")
        lap("commit")
        db.sync_messages(tenant, sid, [reply], offset=synced["positions"], metadata={"source": "proxy"})
        lap("record")
        r0 = schedstat_ns(runner_pid)
        # the embed jobs first (one batch, as the runner's round starts), then the rest (extraction)
        runner_conn.execute("SELECT mnemo_internal.process_job_batch(64)")
        r1 = schedstat_ns(runner_pid)
        runner_conn.execute("CALL mnemo.run_jobs(p_max_seconds => 0)")
        laps["embed_jobs"] = (r1 - r0) / 1e6
        laps["jobs"] = (schedstat_ns(runner_pid) - r0) / 1e6
        e0 = schedstat_ns(enc_pid)
        enc_conn.execute("SELECT mnemo.embed(%s)", (user["content"],))
        e1 = schedstat_ns(enc_pid)
        enc_conn.execute("SELECT mnemo.embed(%s)", (reply["content"],))
        laps["encode_user"] = (e1 - e0) / 1e6
        laps["encode_both"] = (schedstat_ns(enc_pid) - e0) / 1e6
        assert bundle["messages"], "the compile returned no messages"
        history += [user, reply]
        laps["handed_over"] = hand_over
        # the compile's last step (its log row, paging's residency, and the hand-over), wall ms
        laps["log_step"] = float(bundle["report"]["timings_ms"].get("log", 0.0))
        if i >= args.warmup:
            rows.append(laps)
    for c in (proxy_conn, runner_conn, enc_conn):
        c.close()
    parts = ["open", "sync", "compile", "commit", "record", "jobs", "embed_jobs", "encode_user", "encode_both"]
    out = {p: {"mean": round(statistics.mean(r[p] for r in rows), 2),
               "p50": round(statistics.median(r[p] for r in rows), 2)} for p in parts}
    total = sum(out[p]["mean"] for p in ("open", "sync", "compile", "commit", "record", "jobs"))
    out["postgres_total_mean"] = round(total, 2)
    out["per_call"] = [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    out["by_hand_over"] = {
        str(flag): {p: round(statistics.mean(r[p] for r in rows if r["handed_over"] == flag), 2)
                    for p in ("compile", "log_step", "jobs", "embed_jobs")} for flag in (True, False)}
    out["history_messages"] = args.history
    out["calls"] = args.calls
    print(f"\nPostgreSQL's work a managed call (no proxy), {args.calls} calls over a history of"
          f" {args.history}+ messages; backend CPU ms (schedstat), mean / p50:")
    for p in parts:
        print(f"  {p:12} {out[p]['mean']:8.2f} {out[p]['p50']:8.2f}")
    print(f"  {'total':12} {total:8.2f}   (open + sync + compile + commit + record + jobs;"
          f" goal for every process: {GOALS['cpu_ms']})")
    for flag, label in ((True, "the compile's query vector handed to the job"),
                        (False, "the query named by the caller: the job encodes")):
        h = out["by_hand_over"][str(flag)]
        print(f"  calls with {label}: compile {h['compile']:.2f} (its last step {h['log_step']:.2f} wall),"
              f" jobs {h['jobs']:.2f} (embed jobs {h['embed_jobs']:.2f}) ms")
    return out


# ------------------------------------------------------------------------ relay

BARE_RELAY = r'''
import asyncio, json, sys
mode, port, up_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

async def pipe_bytes(src, dst):
    while data := await src.read(65536):
        dst.write(data)
        await dst.drain()

async def pipe_events(src, dst):
    buf, text = b"", []
    while data := await src.read(65536):
        dst.write(data)
        await dst.drain()
        buf += data
        *events, buf = buf.split(b"\n\n")
        for e in events:
            for line in e.split(b"\n"):
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    try:
                        for c in json.loads(line[6:]).get("choices") or []:
                            text.append((c.get("delta") or {}).get("content") or "")
                    except ValueError:
                        pass

async def handle(reader, writer):
    # one request a connection (the client sends Connection: close); the upstream too
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")), 0)
    body = await reader.readexactly(length)
    ur, uw = await asyncio.open_connection("127.0.0.1", up_port)
    uw.write(head + body)
    await uw.drain()
    await (pipe_bytes if mode == "bytes" else pipe_events)(ur, writer)
    uw.close()
    writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()

asyncio.run(main())
'''


def relay_part(args, conn: psycopg.Connection, tenant: str) -> dict:
    import httpx2
    from proxy import free_port, reply_text, wait_http

    text, _ = reply_text(conn, args.pieces)
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    up_port = free_port()
    procs = {"upstream": subprocess.Popen(
        [py, "-m", "mnemosyne.proxy.scripted", "--port", str(up_port), "--pieces", str(args.pieces),
         "--delay", str(1 / args.tokens_per_s), "--first-delay", "0.05", "--text", text], env=env)}
    ports = {}
    ports["serve"] = free_port()
    procs["serve"] = subprocess.Popen(
        [py, "-m", "mnemosyne.cli", "-d", DSN, "serve", "--port", str(ports["serve"]), "--tenant", tenant,
         "--openai-base-url", f"http://127.0.0.1:{up_port}/v1", "--db-pool", "2"],
        env=env, stderr=subprocess.DEVNULL)
    for mode in ("bytes", "events"):
        ports[mode] = free_port()
        procs[mode] = subprocess.Popen([py, "-c", BARE_RELAY, mode, str(ports[mode]), str(up_port)], env=env)
    relays = ["serve", "bytes", "events"]
    cpu = dict.fromkeys(relays + ["upstream"], 0.0)
    calls = dict.fromkeys(relays, 0)
    chars: dict[str, set] = {r: set() for r in relays}
    body = {"model": "gpt-4o", "stream": True, "max_tokens": 256,
            "messages": [{"role": "user", "content": "Say something."}]}

    async def one(url: str, headers: dict) -> int:
        async with httpx2.AsyncClient(timeout=60) as client, \
                client.stream("POST", url, json=body, headers=headers) as r:
            if r.status_code != 200:
                raise RuntimeError(f"{url}: status {r.status_code}")
            n = 0
            async for chunk in r.aiter_bytes():
                n += len(chunk)
            return n

    try:
        wait_http(f"http://127.0.0.1:{up_port}/v1/models")
        wait_http(f"http://127.0.0.1:{ports['serve']}/v1/models")
        time.sleep(0.5)
        headers = {"Authorization": "Bearer sk-bench", "X-Mnemo-Bypass": "1", "Connection": "close"}
        rounds = max(1, args.relay_calls // args.concurrency)
        for r in range(rounds + 1):  # round 0 warms each relay up, not counted
            for relay in relays[r % 3:] + relays[:r % 3]:
                url = f"http://127.0.0.1:{ports[relay]}/v1/chat/completions"
                c0 = {k: proc_cpu_s(procs[k].pid) for k in (relay, "upstream")}
                sizes = asyncio.run(_gather(one, url, headers, args.concurrency))
                if r:
                    cpu[relay] += proc_cpu_s(procs[relay].pid) - c0[relay]
                    cpu["upstream"] += proc_cpu_s(procs["upstream"].pid) - c0["upstream"]
                    calls[relay] += len(sizes)
                    chars[relay].update(sizes)
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
    out = {r: {"calls": calls[r], "cpu_ms_a_call": round(1000 * cpu[r] / calls[r], 2),
               "us_a_piece": round(1e6 * cpu[r] / calls[r] / args.pieces, 1),
               "bytes_a_call": sorted(chars[r])} for r in relays}
    out["upstream"] = {"cpu_ms_a_call": round(1000 * cpu["upstream"] / sum(calls.values()), 2)}
    print(f"\nrelay of one streamed reply ({args.pieces} SSE pieces at {args.tokens_per_s:g}/s),"
          f" {args.concurrency} calls at a time; CPU of the relay process:")
    for r in relays:
        print(f"  {r:8} {out[r]['cpu_ms_a_call']:7.2f} ms a call  {out[r]['us_a_piece']:7.1f} us a piece"
              f"  ({out[r]['calls']} calls, {out[r]['bytes_a_call']} bytes each)")
    print(f"  the scripted provider making the same pieces: {out['upstream']['cpu_ms_a_call']:.2f} ms a call")
    return out


async def _gather(one, url: str, headers: dict, n: int) -> list[int]:
    return list(await asyncio.gather(*(one(url, headers) for _ in range(n))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="ingest,call,relay")
    parser.add_argument("--messages", type=int, default=600, help="ingest: messages a variant, about")
    parser.add_argument("--turns-per-round", type=int, default=16, help="ingest: turns a variant writes a round")
    parser.add_argument("--batch", type=int, default=16, help="ingest: turns a batched statement")
    parser.add_argument("--history", type=int, default=200, help="call: messages recorded before the calls")
    parser.add_argument("--calls", type=int, default=20, help="call: managed calls measured")
    parser.add_argument("--warmup", type=int, default=3, help="call: calls first, not counted")
    parser.add_argument("--pieces", type=int, default=100, help="relay: SSE pieces a reply")
    parser.add_argument("--tokens-per-s", type=float, default=50.0, help="relay: the provider's rate")
    parser.add_argument("--relay-calls", type=int, default=24, help="relay: calls a relay")
    parser.add_argument("--concurrency", type=int, default=4, help="relay: calls at a time")
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    if set(parts) - {"ingest", "call", "relay"}:
        parser.error("--parts takes ingest, call, relay")
    tenant = f"bench_floors_{uuid.uuid4().hex[:8]}"
    results: dict = {"bench": "floors", "tenant": tenant, "loadavg_1m_before": round(os.getloadavg()[0], 2)}
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("SELECT mnemo.create_tenant(%s)", (tenant,))
        with jobs_paused(conn):
            runner_idle(conn)
            for part in parts:
                results[part] = {"ingest": ingest_part, "call": call_part, "relay": relay_part}[part](
                    args, conn, tenant)
    results["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
