"""The write path against a raw INSERT of the same row (make bench-ingest).

Four ways to store the same messages, in one run, interleaved so that the machine's
load hits them alike:

- ``record_message``: mnemo.record_message, one call (one transaction) per message;
- ``record_messages``: mnemo.record_messages, one call per turn (a user message, or an
  assistant message with the tool results that answer it), as the proxy records;
- ``record_messages_batch``: mnemo.record_messages, one call per --batch turns, as an
  importer records;
- ``raw``: one INSERT per message of (tenant, session, turn, message jsonb) into a
  logged table with that primary key;
- ``raw_batch``: one INSERT per --batch turns of their rows into the same table.

The messages are the shared SWE-agent trajectories (tool calls, tool outputs, prose),
replayed session by session in a loop. Each worker (1, then 8 connections) writes the
next few turns in each mode, the modes in a rotating order, and the workers wait for
one another between modes, so that every mode runs under the same concurrency. Per
message: p50 / p95 latency (a batch call's time divided by its messages) and
throughput (messages / the wall time of the mode's phases); the ratios to ``raw``.

Then the import: an OpenAI JSONL file built from LoCoMo conversations (a session per
line), imported into a new tenant by `mnemo import` (the CLI, as a user runs it; its
start-up included), messages/s.

pg_cron's job runner is paused for the run (the embedding and extract jobs the writes
queue are not part of the timed work); the jobs queued are counted, then removed,
with the bench table. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from mnemosyne import default_dsn, importers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo import DATA as LOCOMO_JSON
from locomo import jobs_paused, pct

DSN = default_dsn()
TRAJ = next((p / "shared" / "bench" / "traj" / "swe-agent" for p in Path(__file__).resolve().parents
             if (p / "shared" / "bench" / "traj" / "swe-agent").is_dir()), None)
MODES = ("record_message", "record_messages", "record_messages_batch", "raw", "raw_batch")
BATCHED = ("record_messages_batch", "raw_batch")  # --batch turns per call
RAW_TABLE = "public.bench_ingest_raw"


def runner_idle(conn: psycopg.Connection, timeout: float = 90.0) -> None:
    """Waits until no job runner that pg_cron started before the pause is still
    running (a run polls for up to a minute), so none shares the timed part."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CALL mnemo.run_jobs%%'"
            " AND state = 'active' AND pid <> pg_backend_pid()").fetchone()[0]:
        time.sleep(1)


def turns_of(messages: list[dict]) -> list[list[dict]]:
    """A session's messages as turns: each message that is not a tool result starts one,
    the tool results join the turn before them."""
    turns: list[list[dict]] = []
    for m in messages:
        if m["role"] == "tool" and turns:
            turns[-1].append(m)
        else:
            turns.append([m])
    return turns


def corpus() -> list[list[list[dict]]]:
    """The shared trajectories' sessions, each as its turns of chat messages."""
    if TRAJ is None:
        sys.exit("the shared SWE-agent trajectories (shared/bench/traj/swe-agent) are missing")
    sessions = []
    for path in sorted(TRAJ.rglob("*.traj")):
        for s in importers.read(path, "swe-agent").sessions:
            messages = [e["message"] for e in s.messages if e["message"]["role"] not in ("system", "developer")]
            if messages:
                sessions.append(turns_of(messages))
    return sessions


class Worker:
    """One connection's share: a session per mode, refilled from the corpus in a loop."""

    def __init__(self, tenant: str, sessions: list, offset: int, has_batch: bool, batch: int = 1):
        self.conn = psycopg.connect(DSN, autocommit=True)
        self.tenant, self.sessions, self.has_batch, self.batch = tenant, sessions, has_batch, batch
        self.next_session = offset
        self.cursor: dict[str, tuple[uuid.UUID, list, int]] = {}  # mode -> (session, turns, next turn)
        self.raw_turn: dict[uuid.UUID, int] = {}
        self.latencies: dict[str, list[float]] = {m: [] for m in MODES}
        self.messages: dict[str, int] = dict.fromkeys(MODES, 0)

    def _session(self, mode: str) -> tuple[uuid.UUID, list, int]:
        sid, turns, at = self.cursor.get(mode, (None, [], 0))
        if at >= len(turns):
            turns = self.sessions[self.next_session % len(self.sessions)]
            self.next_session += 1
            if mode.startswith("raw"):
                sid = uuid.uuid4()
                self.raw_turn[sid] = 0
            else:
                sid = self.conn.execute("SELECT mnemo.start_session(%s, p_agent_id => 'bench-ingest')",
                                        (self.tenant,)).fetchone()[0]
            at = 0
        return sid, turns, at

    def write(self, mode: str, n_turns: int) -> None:
        step = self.batch if mode in BATCHED else 1
        for _ in range(0, n_turns, step):
            sid, turns, at = self._session(mode)
            turn = [m for t in turns[at:at + step] for m in t]  # the turns of one call, within a session
            self.cursor[mode] = (sid, turns, at + step)
            if mode == "record_message":
                for m in turn:
                    t0 = time.perf_counter()
                    self.conn.execute("SELECT mnemo.record_message(%s, %s, %s)", (self.tenant, sid, Jsonb(m)))
                    self.latencies[mode].append(time.perf_counter() - t0)
            elif mode == "raw":
                for m in turn:
                    t0 = time.perf_counter()
                    self.conn.execute(f"INSERT INTO {RAW_TABLE} VALUES (%s, %s, %s, %s)",
                                      (self.tenant, sid, self.raw_turn[sid], Jsonb(m)))
                    self.latencies[mode].append(time.perf_counter() - t0)
                    self.raw_turn[sid] += 1
            else:
                t0 = time.perf_counter()
                if mode.startswith("record_messages"):
                    self.conn.execute("SELECT mnemo.record_messages(%s, %s, %s::jsonb[])",
                                      (self.tenant, sid, [Jsonb(m) for m in turn]))
                else:
                    first = self.raw_turn[sid]
                    self.conn.execute(
                        f"INSERT INTO {RAW_TABLE} SELECT %s, %s, %s + t.i - 1, t.m"
                        " FROM unnest(%s::jsonb[]) WITH ORDINALITY AS t (m, i)",
                        (self.tenant, sid, first, [Jsonb(m) for m in turn]))
                    self.raw_turn[sid] += len(turn)
                per_message = (time.perf_counter() - t0) / len(turn)
                self.latencies[mode].extend([per_message] * len(turn))
            self.messages[mode] += len(turn)


def run_level(tenant: str, sessions: list, workers: int, messages: int, turns_per_round: int,
              has_batch: bool, batch: int) -> dict:
    """`workers` connections writing about `messages` messages per mode in all."""
    modes = [m for m in MODES if has_batch or not m.startswith("record_messages")]
    pool = [Worker(tenant, sessions, i * 7, has_batch, batch) for i in range(workers)]
    wall = dict.fromkeys(modes, 0.0)
    barrier = threading.Barrier(workers + 1)
    plan: list[str] = []
    per_turn = sum(len(t) for s in sessions for t in s) / sum(len(s) for s in sessions)
    rounds = max(1, round(messages / (workers * turns_per_round * per_turn)))
    for r in range(rounds):
        plan.extend(modes[r % len(modes):] + modes[:r % len(modes)])

    def work(w: Worker) -> None:
        for mode in plan:
            barrier.wait()
            w.write(mode, turns_per_round)
            barrier.wait()

    threads = [threading.Thread(target=work, args=(w,)) for w in pool]
    for t in threads:
        t.start()
    for mode in plan:
        barrier.wait()
        t0 = time.perf_counter()
        barrier.wait()
        wall[mode] += time.perf_counter() - t0
    for t in threads:
        t.join()
    out = {}
    for mode in modes:
        lat = [x for w in pool for x in w.latencies[mode]]
        n = sum(w.messages[mode] for w in pool)
        out[mode] = {"messages": n, "p50_ms": round(1000 * statistics.median(lat), 3),
                     "p95_ms": round(1000 * pct(lat, 0.95), 3), "per_s": round(n / wall[mode], 1)}
    for mode in modes:
        if mode != "raw":
            out[mode]["ratio_to_raw"] = round(out[mode]["per_s"] / out["raw"]["per_s"], 3)
    out["record_messages_batch_to_raw_batch"] = (
        round(out["record_messages_batch"]["per_s"] / out["raw_batch"]["per_s"], 3) if has_batch else None)
    for w in pool:
        w.conn.close()
    return out


def profile(tenant: str, sessions: list, messages: int, mode: str, batch: int) -> dict:
    """Where record_message's time goes: each routine it calls, by the server's own
    function statistics (track_functions), over `messages` messages written in one
    connection in `mode` (record_message, record_messages_batch: --batch turns a call). Shares are of the
    client's wall time per message; "statements" is the API function's own time (its
    checks, INSERTs, UPDATEs) and "commit, round trip" what the client waited beyond it."""
    w = Worker(tenant, sessions, 3, True, batch)
    w.conn.execute("SET track_functions = 'all'")
    w.conn.execute("SELECT pg_stat_clear_snapshot(), pg_stat_reset()")
    t0 = time.perf_counter()
    while w.messages[mode] < messages:
        w.write(mode, w.batch)
    wall = time.perf_counter() - t0
    w.conn.execute("SELECT pg_stat_force_next_flush()")
    w.conn.execute("SET track_functions = 'none'")
    time.sleep(0.5)
    rows = w.conn.execute(
        "SELECT schemaname || '.' || funcname, sum(calls), sum(total_time), sum(self_time)"
        " FROM pg_stat_user_functions WHERE schemaname IN ('mnemo', 'mnemo_internal')"
        " GROUP BY 1 ORDER BY 3 DESC").fetchall()
    n = w.messages[mode]
    w.conn.close()
    api_names = ("mnemo.record_message", "mnemo.record_messages")
    out = {"messages": n, "wall_ms_per_message": round(1000 * wall / n, 3), "routines": {}}
    for name, calls, total, self_ms in rows:
        if name not in api_names:
            out["routines"][name] = {"calls_per_message": round(float(calls) / n, 2),
                                     "total_ms": round(total / n, 3), "self_ms": round(self_ms / n, 3),
                                     "share": round(total / 1000 / wall, 3)}
    api_self = sum(r[3] for r in rows if r[0] in api_names)
    out["statements"] = {"self_ms": round(api_self / n, 3), "share": round(api_self / 1000 / wall, 3)}
    out["commit, round trip"] = round(1 - sum(r[3] for r in rows) / 1000 / wall, 3)
    return out


def import_rate(conversations: int) -> dict:
    """`mnemo import` of LoCoMo conversations as OpenAI JSONL (a session per line)."""
    data = json.loads(Path(LOCOMO_JSON).read_text(encoding="utf-8"))[:conversations]
    lines = []
    for sample in data:
        conv = sample["conversation"]
        for _, _, turns in importers.locomo_sessions(conv):
            lines.append(json.dumps({"messages": [importers.locomo_message(conv, t) for t in turns]}))
    tenant = f"bench_import_{uuid.uuid4().hex[:8]}"
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    try:
        mnemo = Path(sys.executable).with_name("mnemo")
        t0 = time.perf_counter()
        done = subprocess.run([str(mnemo), "import", f.name, "--format", "openai", "--tenant", tenant,
                               "--create-tenant"], check=False, capture_output=True, text=True, env={**os.environ})
        seconds = time.perf_counter() - t0
    finally:
        os.unlink(f.name)
    if done.returncode:
        sys.exit(f"mnemo import failed: {done.stdout}{done.stderr}")
    n = sum(len(json.loads(x)["messages"]) for x in lines)
    return {"tenant": tenant, "messages": n, "sessions": len(lines), "seconds": round(seconds, 2),
            "per_s": round(n / seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=2000, help="messages per mode at each level (about)")
    ap.add_argument("--workers", default="1,8", help="connection counts")
    ap.add_argument("--batch", type=int, default=16, help="turns per call of the batch modes")
    ap.add_argument("--turns-per-round", type=int, default=16,
                    help="turns a worker writes per mode before the next (a multiple of --batch)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="only profile record_message (and record_messages) over N messages")
    ap.add_argument("--import-conversations", type=int, default=2, help="LoCoMo conversations to import (0: none)")
    args = ap.parse_args()

    sessions = corpus()
    run = uuid.uuid4().hex[:8]
    tenant = f"bench_ingest_{run}"
    conn = psycopg.connect(DSN, autocommit=True)
    has_batch = conn.execute(
        "SELECT EXISTS (SELECT FROM pg_proc WHERE proname = 'record_messages'"
        " AND pronamespace = 'mnemo'::regnamespace)").fetchone()[0]
    conn.execute("SELECT mnemo.create_tenant(%s)", (tenant,))
    conn.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
    conn.execute(f"CREATE TABLE {RAW_TABLE} (tenant_id text, session_id uuid, turn_index integer,"
                 " message jsonb NOT NULL, PRIMARY KEY (tenant_id, session_id, turn_index))")
    levels = {}
    imported = None
    with jobs_paused(conn):
        runner_idle(conn)
        try:
            if args.profile:
                shares = {mode: profile(tenant, sessions, args.profile, mode, args.batch)
                          for mode in ("record_message", "record_messages_batch")[:1 + has_batch]}
                for mode, p in shares.items():
                    print(f"\n{mode}: {p['wall_ms_per_message']} ms per message (wall), by routine:")
                    for name, r in p["routines"].items():
                        print(f"  {name:44} {r['calls_per_message']:5} calls {r['total_ms']:7.3f} ms"
                              f" (self {r['self_ms']:7.3f})  {100 * r['share']:5.1f} %")
                    print(f"  {'statements (the API function itself)':44} {'':11} {p['statements']['self_ms']:7.3f} ms"
                          f"{'':16}{100 * p['statements']['share']:5.1f} %")
                    print(f"  {'commit, round trip':44} {'':48}{100 * p['commit, round trip']:5.1f} %")
                levels["profile"] = shares
                args.workers, args.import_conversations = "", 0
            for workers in (int(x) for x in args.workers.split(",") if x):
                levels[workers] = level = run_level(tenant, sessions, workers, args.messages,
                                                    args.turns_per_round, has_batch, args.batch)
                print(f"\n{workers} connection{'s' * (workers > 1)}:")
                print(f"  {'mode':22} {'messages':>8} {'p50 ms':>8} {'p95 ms':>8} {'msg/s':>9} {'/ raw':>6}")
                for mode, r in level.items():
                    if isinstance(r, dict):
                        print(f"  {mode:22} {r['messages']:8} {r['p50_ms']:8.2f} {r['p95_ms']:8.2f}"
                              f" {r['per_s']:9.1f} {r.get('ratio_to_raw', 1.0):6.3f}")
                if has_batch:
                    print(f"  record_messages_batch / raw_batch: {level['record_messages_batch_to_raw_batch']}")
            if args.import_conversations:
                imported = import_rate(args.import_conversations)
                print(f"\nmnemo import: {imported['messages']} messages in {imported['sessions']} sessions,"
                      f" {imported['seconds']} s: {imported['per_s']} messages/s")
        finally:
            tenants = [tenant] + ([imported["tenant"]] if imported else [])
            jobs = dict(conn.execute(
                "SELECT kind, count(*) FROM mnemo.jobs WHERE tenant_id = ANY (%s) AND status = 'queued'"
                " GROUP BY kind", (tenants,)).fetchall())
            conn.execute("DELETE FROM mnemo.jobs WHERE tenant_id = ANY (%s) AND status = 'queued'", (tenants,))
            conn.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
    print(f"jobs queued by the writes (not run; removed): {jobs}")
    print(json.dumps({"bench": "ingest", "tenant": tenant, "record_messages": has_batch,
                      "corpus": {"sessions": len(sessions), "messages": sum(len(t) for s in sessions for t in s)},
                      "levels": levels, "import": imported, "jobs_queued": jobs}))


if __name__ == "__main__":
    main()
