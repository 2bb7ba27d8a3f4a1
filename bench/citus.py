"""make bench-citus: compile through a Citus coordinator against a single node, on the
same corpus, then a rebalance under write load (issue 45).

The same LoCoMo conversations are recorded, one tenant each, into a single-node
database and into a Citus cluster's coordinator (scripts/citus.sh), message by message
through the API (ingest: messages/s for each); their embed jobs are run; then the same
compile calls (a new session of the tenant asks a LoCoMo question, budget 2000) go to
both, alternately, so that the machine's load hits them alike. Reported per system:
compile p50 / p95 (ms, client side) and, from /proc, the CPU seconds the server
processes of each node used during the compile phase, per call (the coordinator's
against the workers'). All nodes share this machine's cores: this measures per-call
overhead and its split, not speed-up; from the split it projects the calls/s of N
workers (projection() says how).

Then, on the local cluster of scripts/citus.sh (skipped on another), the cluster
grows by a worker and is rebalanced while writers record messages through the API
(bench/citus_rebalance.py): writes/s before, during and after the move, its duration,
the longest a writer waited, acknowledged writes lost and duplicated (must be 0), the
jobs completed after the move; the worker is then drained and removed.

    .venv/bin/python bench/citus.py --single URL --citus URL [--conversations 4 --calls 100]
        [--writers 4 --transfer block_writes --no-rebalance --cores-per-node N --coordinator-cores N]

The CPU of a node is the CPU its server used (node_cpu) between the start and the end
of the compile phase, Mnemosyne's pg_cron jobs paused on both systems meanwhile.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import citus_rebalance
import conversations as conv
import locomo
import psycopg

from mnemosyne import connect

TICK = os.sysconf("SC_CLK_TCK")


def node_cpu(pgdata: Path) -> float:
    """CPU seconds (user + system) the server of pgdata has used: its postmaster's own,
    its live children's (backends, Citus's and pg_cron's workers), and its exited
    children's, which the postmaster reaped (its cutime + cstime). Without the last, a
    process that exits between two readings (a Citus connection closed, a pg_cron run
    ended) takes its CPU out of the difference, which can go negative."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        if int(fields[1]) == postmaster:  # ppid
            total += int(fields[11]) + int(fields[12])
        elif pid == postmaster:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
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


def projection(coordinator_ms: float, worker_ms: float, single_ms: float, cores_per_worker: int,
               coordinator_cores: int, workers=(1, 2, 4, 8, 16, 32, 64)) -> dict:
    """Compile calls/s that N workers would carry, from the measured server CPU per call:
    each call costs its one worker worker_ms and the coordinator coordinator_ms, so
        calls/s(N) = min(N x cores_per_worker / worker_ms, coordinator_cores / coordinator_ms)
    (x 1000, ms to s), with the single node's cores_per_worker / single_ms beside it. It
    assumes CPU-bound calls spread evenly over the workers' tenants, and leaves out the
    network, the clients and memory. The coordinator caps it from N = the returned
    'coordinator_bound_from' workers on."""
    per_worker = cores_per_worker * 1000 / worker_ms if worker_ms > 0 else float("inf")
    cap = coordinator_cores * 1000 / coordinator_ms if coordinator_ms > 0 else float("inf")
    return {
        "cores_per_worker": cores_per_worker, "coordinator_cores": coordinator_cores,
        "single_node_calls_per_s": round(cores_per_worker * 1000 / single_ms, 1) if single_ms > 0 else None,
        "calls_per_s": {str(n): round(min(n * per_worker, cap), 1) for n in workers},
        "coordinator_cap_calls_per_s": round(cap, 1) if cap != float("inf") else None,
        "coordinator_bound_from": math.ceil(cap / per_worker) if cap != float("inf") else None,
    }


def rebalance(dsn: str, writers: int, transfer: str) -> dict | None:
    """The rebalance under write load on the local cluster (bench/citus_rebalance.py),
    with the time add-worker and remove-worker took."""
    if citus_rebalance.local_cluster(dsn) is None:
        print("rebalance: skipped (not the local cluster of scripts/citus.sh)", file=sys.stderr)
        return None
    t = time.perf_counter()
    with citus_rebalance.added_worker(dsn) as new:
        add_s = time.perf_counter() - t
        r = citus_rebalance.rebalance_under_writes(
            dsn, new, writers=writers, transfer=transfer, log=lambda s: print(s, file=sys.stderr, flush=True))
        t = time.perf_counter()
    r.update(add_worker_s=round(add_s, 1), remove_worker_s=round(time.perf_counter() - t, 1),
             tenants_moved=len(r["tenants_moved"]), on_new_worker=len(r["on_new_worker"]))
    for k in ("lost_examples", "duplicated_examples"):
        if not r[k]:
            del r[k]
    return r


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
    ap.add_argument("--writers", type=int, default=4, help="writers during the rebalance (one per shard group)")
    ap.add_argument("--no-rebalance", action="store_true", help="leave out the rebalance under writes")
    ap.add_argument("--transfer", default=citus_rebalance.TRANSFER,
                    help="the rebalance's shard_transfer_mode (auto needs a logged working memory:"
                    " docs/operations.md, 'Growing the cluster')")
    ap.add_argument("--cores-per-node", type=int, default=os.cpu_count(),
                    help="cores of a worker (and of the single node) in the projection (default: this machine's)")
    ap.add_argument("--coordinator-cores", type=int, default=os.cpu_count(),
                    help="the coordinator's cores in the projection (default: this machine's)")
    args = ap.parse_args()
    # Mnemosyne's pg_cron jobs paused on both systems for the whole run (the bench runs
    # the jobs itself): the sweeps' and the runner's CPU would count as the calls'
    with ExitStack() as paused:
        for dsn in (args.single, args.citus):
            conn = paused.enter_context(psycopg.connect(dsn, autocommit=True))
            paused.enter_context(conv.jobs_paused(conn, "mnemo-%"))
        return bench(args)


def bench(args: argparse.Namespace) -> int:
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
    out["projection"] = projection(coord, workers, s["cpu_ms_per_call"][0], args.cores_per_node,
                                   args.coordinator_cores)
    p = out["projection"]
    print(f"projection ({args.cores_per_node} cores a worker, {args.coordinator_cores} on the coordinator;"
          f" single node {p['single_node_calls_per_s']} calls/s): "
          + ", ".join(f"{n} workers {v}" for n, v in p["calls_per_s"].items())
          + f" calls/s; the coordinator caps it at {p['coordinator_cap_calls_per_s']} from"
          f" {p['coordinator_bound_from']} workers")
    if not args.no_rebalance:
        r = out["rebalance"] = rebalance(args.citus, args.writers, args.transfer)
        if r:
            print(f"rebalance: a worker added in {r['add_worker_s']} s, a shard group moved in {r['rebalance_s']} s"
                  f" ({r['tenants_moved']} of {r['tenants']} tenants); writes/s before {r['writes_per_s_before']},"
                  f" during {r['writes_per_s_during']}, after {r['writes_per_s_after']}; longest wait"
                  f" {r['longest_write_wait_s']} s; {r['acknowledged']} acknowledged, {r['lost']} lost,"
                  f" {r['duplicated']} duplicated, {r['failed']} calls failed and retried ({r['gave_up']} given up);"
                  f" jobs {r['jobs']} in {r['jobs_s']} s after; removed in {r['remove_worker_s']} s")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
