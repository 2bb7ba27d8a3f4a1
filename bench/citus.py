"""Compile through a Citus coordinator against a single node, on the same corpus
(issue 45; the first figures of make bench-citus, run by hand for now).

The same LoCoMo conversations are recorded, one tenant each, into a single-node
database and into a Citus cluster's coordinator (scripts/citus.sh), message by message
through the API (ingest: messages/s for each); their embed jobs are run; then the same
compile calls (a new session of the tenant asks a LoCoMo question, budget 2000) go to
both, alternately, so that the machine's load hits them alike. Reported per system:
compile p50 / p95 (ms, client side) and, from /proc, the CPU seconds the server
processes of each node used during the compile phase, per call (the coordinator's
against the workers'). All nodes share this machine's cores: this measures per-call
overhead and its split, not speed-up.

    .venv/bin/python bench/citus.py --single URL --citus URL [--conversations 4 --calls 100]

The CPU of a node is the sum of utime + stime of its postmaster's children (backends,
Citus's and pg_cron's workers) at the start and the end of the compile phase; a
process that exits in between is not counted (the calls' connections stay open).
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import conversations as conv
import locomo
import psycopg

from mnemosyne import connect

TICK = os.sysconf("SC_CLK_TCK")


def node_cpu(pgdata: Path) -> float:
    """CPU seconds (user + system) of the children of the postmaster of pgdata."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:  # ppid
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def ingest(dsn: str, samples: list[dict], prefix: str) -> tuple[list[str], float]:
    """Records the conversations (one tenant each), runs their jobs; returns the
    tenants and the messages recorded per second."""
    tenants, n, t0 = [], 0, time.perf_counter()
    with connect(dsn) as db:
        for i, sample in enumerate(samples):
            tenant = f"{prefix}_{i}"
            n += len(locomo.ingest(db, sample, tenant))
            tenants.append(tenant)
    rate = n / (time.perf_counter() - t0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conv.run_jobs(conn)
    return tenants, rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--single", required=True, help="URL of the single-node database")
    ap.add_argument("--citus", required=True, help="URL of the Citus coordinator's database")
    ap.add_argument("--single-data", help="its data directory (default $MNEMO_HOME/pgdata)")
    ap.add_argument("--citus-data", help="the cluster's node directories, comma-separated"
                    " (default $MNEMO_HOME/citus/{coordinator,worker1,worker2}/pgdata)")
    ap.add_argument("--conversations", type=int, default=4, help="LoCoMo conversations (of 10)")
    ap.add_argument("--calls", type=int, default=100, help="compile calls per system")
    ap.add_argument("--budget", type=int, default=2000)
    args = ap.parse_args()
    home = Path(os.environ.get("MNEMO_HOME", ".mnemo"))
    single_data = Path(args.single_data or home / "pgdata")
    citus_data = [Path(p) for p in args.citus_data.split(",")] if args.citus_data else [
        home / "citus" / n / "pgdata" for n in ("coordinator", "worker1", "worker2")]
    samples = json.loads(Path(locomo.DATA).read_text())[:args.conversations]
    run = uuid.uuid4().hex[:6]
    systems = {"single": args.single, "citus": args.citus}
    tenants, rates = {}, {}
    for name, dsn in systems.items():
        with psycopg.connect(dsn, autocommit=True) as conn, conv.jobs_paused(conn):
            tenants[name], rates[name] = ingest(dsn, samples, f"bc_{run}")
        print(f"{name}: {rates[name]:.0f} messages/s recorded", file=sys.stderr, flush=True)
    questions = [(i, qa["question"]) for i, s in enumerate(samples) for qa in s["qa"][:args.calls]]
    questions = [questions[(k * 7919) % len(questions)] for k in range(args.calls)]  # spread, fixed
    lat: dict[str, list[float]] = {name: [] for name in systems}
    nodes = {"single": [single_data], "citus": citus_data}
    with connect(args.single) as single, connect(args.citus) as citus:
        dbs = {"single": single, "citus": citus}
        sids = {name: [db.start_session(t, context_window=128000) for t in tenants[name]]
                for name, db in dbs.items()}
        for name, db in dbs.items():  # warm each connection once, untimed
            db.compile_context(tenants[name][0], sids[name][0], "hello", budget=args.budget)
        cpu0 = {name: [node_cpu(d) for d in ds] for name, ds in nodes.items()}
        for i, q in questions:
            for name, db in dbs.items():
                t = time.perf_counter()
                db.compile_context(tenants[name][i], sids[name][i], q, budget=args.budget)
                lat[name].append((time.perf_counter() - t) * 1000)
        cpu1 = {name: [node_cpu(d) for d in ds] for name, ds in nodes.items()}
    out: dict = {"conversations": len(samples), "calls": args.calls, "budget": args.budget}
    for name in systems:
        cpu = [round((b - a) / args.calls * 1000, 1) for a, b in zip(cpu0[name], cpu1[name])]
        out[name] = {"ingest_msgs_per_s": round(rates[name], 1),
                     "compile_p50_ms": round(statistics.median(lat[name]), 1),
                     "compile_p95_ms": round(conv.pct(lat[name], 0.95), 1),
                     "cpu_ms_per_call": cpu}
    c, s = out["citus"], out["single"]
    out["p50_ratio"] = round(c["compile_p50_ms"] / s["compile_p50_ms"], 2)
    out["p95_ratio"] = round(c["compile_p95_ms"] / s["compile_p95_ms"], 2)
    coord, workers = c["cpu_ms_per_call"][0], sum(c["cpu_ms_per_call"][1:])
    out["coordinator_over_worker_cpu"] = round(coord / workers, 3) if workers else None
    print(f"single: compile p50 {s['compile_p50_ms']} / p95 {s['compile_p95_ms']} ms,"
          f" CPU {s['cpu_ms_per_call'][0]} ms/call, ingest {s['ingest_msgs_per_s']} msg/s")
    print(f"citus:  compile p50 {c['compile_p50_ms']} / p95 {c['compile_p95_ms']} ms ({out['p50_ratio']} x /"
          f" {out['p95_ratio']} x), CPU ms/call coordinator {coord}, workers {c['cpu_ms_per_call'][1:]},"
          f" ingest {c['ingest_msgs_per_s']} msg/s")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
