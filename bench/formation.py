"""What an extract job costs with its memory lookups per batch against per candidate.

Formation reads the tenant's memories for every candidate it forms: the hash, the
admission log, the exact duplicate, the current facts of a functional predicate and
the five nearest memories (an HNSW search). The extract job now reads them for all its
candidates in one statement (plpy/mnemo_db/formation/lookups.py, Batch); the payload
"lookup": "per_candidate" keeps the old way, one query per question and candidate.

A tenant is filled with the first --pool LoCoMo conversations, extracted offline (its
memories are the pool each lookup searches); the next conversation's first --sessions
sessions are imported beside them, and each session's extract job runs --reps times in
each mode, alternating (ABBA), each in a transaction rolled back, so every run forms
the same candidates against the same pool. --turns N splits each session into jobs of
N turns, run in order in that transaction (the job runner's jobs after a turn or two). A run before them, rolled back too, warms
the backend (its encoder's cache holds the session's candidates afterwards, in both
modes alike: the figures are formation's, the encoder's share left out).

Per mode: the backend's CPU (/proc/<pid>/task/*/schedstat, every thread) and wall time
of the extract call, summed over the sessions, per run; the candidates; the ratio
batch / per-candidate, from the same run. Needs the database on this machine. Ends with
one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg
from extraction import extract_tenant, select
from locomo import DATA

from mnemosyne import connect, default_dsn, importers

DSN = default_dsn()


def schedstat_ns(pid: int) -> int:
    """Time on a CPU of every thread of a process (ns), as bench/floors.py reads it."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


def run(conn, pid: int, tenant: str, session: str, lookup: str, turns: int) -> tuple[float, float, dict]:
    """The session's extract jobs, one over the whole session or one per `turns` turns
    in order, rolled back together: (CPU ms, wall ms, their stats summed)."""
    count = conn.execute("SELECT turn_count FROM mnemo.sessions WHERE tenant_id = %s AND session_id = %s",
                         (tenant, session)).fetchone()[0]
    step = turns or count
    cpu = wall = 0.0
    total: dict = {}
    with conn.transaction(force_rollback=True):
        for lo in range(0, count, step):
            payload = {"session_id": session, "from_turn": lo, "to_turn": lo + step - 1}
            if lookup == "per_candidate":
                payload["lookup"] = "per_candidate"
            c0, t0 = schedstat_ns(pid), time.perf_counter()
            got = conn.execute("SELECT mnemo_internal.extract(%s, %s::jsonb)",
                               (tenant, json.dumps(payload))).fetchone()[0]
            wall, cpu = wall + (time.perf_counter() - t0) * 1e3, cpu + (schedstat_ns(pid) - c0) / 1e6
            for k, v in got.items():
                if isinstance(v, int):
                    total[k] = total.get(k, 0) + v
    return cpu, wall, total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DATA, help="locomo10.json")
    ap.add_argument("--pool", type=int, default=2, help="LoCoMo conversations extracted into the tenant first")
    ap.add_argument("--sessions", type=int, default=6, help="sessions of the next conversation measured")
    ap.add_argument("--reps", type=int, default=4, help="runs per mode and session (ABBA)")
    ap.add_argument("--turns", type=int, default=0,
                    help="turns an extract job (0: the whole session in one job; 2: the live proxy's jobs)")
    args = ap.parse_args()

    parts = list(select(importers.read_locomo(Path(args.data)), args.pool + 1, 0).values())
    tenant = f"xbench_formation_{uuid.uuid4().hex[:8]}"
    db = connect(DSN)
    conn = psycopg.connect(DSN, autocommit=True)
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    try:
        pool = importers.Parsed("locomo", [s for p in parts[:args.pool] for s in p.sessions])
        extract_tenant(db, conn, tenant, pool, "offline")
        measured = parts[args.pool].sessions[:args.sessions]
        importers.run_import(db, tenant, importers.Parsed("locomo", measured))
        conn.execute("DELETE FROM mnemo.jobs WHERE tenant_id = %s AND status = 'queued'", (tenant,))
        memories = conn.execute("SELECT count(*) FROM mnemo.memories WHERE tenant_id = %s AND is_active"
                                " AND superseded_by IS NULL", (tenant,)).fetchone()[0]
        cpu = {"batch": [0.0] * args.reps, "per_candidate": [0.0] * args.reps}
        wall = {"batch": [0.0] * args.reps, "per_candidate": [0.0] * args.reps}
        cands, outcomes = 0, {}
        for s in measured:
            sid = str(s.session_id)
            _, _, warm = run(conn, pid, tenant, sid, "batch", args.turns)
            cands += warm["candidates"]
            for r in range(args.reps):
                order = ("batch", "per_candidate") if r % 2 == 0 else ("per_candidate", "batch")
                for mode in order:
                    c, w, got = run(conn, pid, tenant, sid, mode, args.turns)
                    cpu[mode][r] += c
                    wall[mode][r] += w
                    outcomes.setdefault(sid, set()).add(json.dumps(
                        {k: got.get(k) for k in ("admitted", "merged", "superseded", "rejected", "skipped")}))
        same = all(len(v) == 1 for v in outcomes.values())  # both modes formed the same, every run
        out = {"pool_memories": memories, "sessions": len(measured), "candidates": cands, "reps": args.reps, "turns_a_job": args.turns,
               "same_outcomes": same, "tenant": tenant}
        for mode, runs in cpu.items():
            out[mode] = {"cpu_ms": round(statistics.median(runs), 1),
                         "wall_ms": round(statistics.median(wall[mode]), 1),
                         "cpu_ms_per_candidate": round(statistics.median(runs) / max(cands, 1), 3)}
        out["cpu_ratio"] = round(out["batch"]["cpu_ms"] / out["per_candidate"]["cpu_ms"], 3)
        out["wall_ratio"] = round(out["batch"]["wall_ms"] / out["per_candidate"]["wall_ms"], 3)
        out["cpu_ratio_per_rep"] = [round(b / p, 3) for b, p in zip(cpu["batch"], cpu["per_candidate"], strict=True)]
        print(f"pool {memories} memories; {len(measured)} sessions, {cands} candidates, {args.reps} runs a mode",
              file=sys.stderr)
        for mode in ("per_candidate", "batch"):
            print(f"  {mode:14} CPU {out[mode]['cpu_ms']:8.1f} ms  wall {out[mode]['wall_ms']:8.1f} ms"
                  f"  ({out[mode]['cpu_ms_per_candidate']:.2f} ms CPU a candidate)", file=sys.stderr)
        print(f"  batch / per-candidate: CPU {out['cpu_ratio']}, wall {out['wall_ratio']}", file=sys.stderr)
        print(json.dumps(out))
    finally:
        conn.close()  # the tenant stays, as bench-extraction's do (xbench_formation_*)
    return 0


if __name__ == "__main__":
    sys.exit(main())
