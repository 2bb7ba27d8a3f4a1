"""make bench-first-compile: a session's first compile over a freshly written history
against a warm compile of the same call (issue 43's goal: first <= 2 x warm).

A history is "fresh" when it was just written and its embed jobs have not run: no
message has an embedding or stored levels yet, as after `mnemo import` or an agent's
first burst of turns. Each LongMemEval history (~500 turns over ~50 dated sessions) is
written as its own tenant, then one call is compiled on a long-lived connection that
has already compiled for other tenants (as a proxy's pooled connection has):
  question  a new session asks the LongMemEval question (the bench-locomo protocol:
            the history reaches it as recalled turns in the memory block);
  continue  the history's last session asks it (its own turns are the history).
History h takes call h % 2 at budget h // 2 % 4 (1k / 2k / 4k / 8k), so --histories 8
covers each pair once, 16 twice. Timed: the first compile, the same call again (warm),
and, once the jobs have run (embeddings and levels stored), the same call (settled).
Printed per call and budget: medians of total and pack-phase milliseconds and the
first / warm ratio; overall p50 / p95. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid

import conversations as conv
import longmemeval as lme
import psycopg

from mnemosyne import connect, default_dsn

DSN = default_dsn()
BUDGETS = (1000, 2000, 4000, 8000)


def ingest(db, conn: psycopg.Connection, inst: dict, tenant: str) -> tuple[str, int]:
    """The history recorded at its dates as bench-longmemeval records it (formation
    off: only the embed jobs queue); returns the last session's id and the turns."""
    n = len(conv.record_sessions(db, tenant, lme.sessions_of(inst), agent_id="lme"))
    last = conn.execute("SELECT session_id::text FROM mnemo.sessions WHERE tenant_id = %s"
                        " ORDER BY started_at DESC LIMIT 1", (tenant,)).fetchone()[0]
    return last, n


def compile_once(db, tenant: str, sid: str, question: str, budget: int) -> tuple[float, float]:
    """Total and pack-phase milliseconds of one compile (not logged)."""
    t = time.perf_counter()
    bundle = db.compile_context_bundle(tenant, sid, question, budget=budget, log=False)
    total = (time.perf_counter() - t) * 1000
    return total, float(bundle["report"]["timings_ms"].get("pack", 0.0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--histories", type=int, default=16, help="LongMemEval histories to use (of 120)")
    ap.add_argument("--data", default=str(lme.DATA), help="a LongMemEval JSON file (.json or .json.xz)")
    args = ap.parse_args()
    picked = lme.select(lme.load(args.data), args.histories)  # spread over the types
    run = uuid.uuid4().hex[:6]
    rows: dict[tuple[str, int], dict[str, list[tuple[float, float]]]] = {}
    with connect(DSN) as db, connect(DSN) as pooled, psycopg.connect(DSN, autocommit=True) as conn, \
            conv.jobs_paused(conn):
        warmup = f"fc_{run}_warmup"
        db.create_tenant(warmup)
        warm_sid = str(db.start_session(warmup))
        db.record_message(warmup, warm_sid, {"role": "user", "content": "hello"})
        pooled.compile_context_bundle(warmup, warm_sid, "hello", log=False)
        for h, inst in enumerate(picked):
            tenant = f"fc_{run}_{h}"
            t0 = time.perf_counter()
            last_sid, n = ingest(db, conn, inst, tenant)
            name, budget = ("question", "continue")[h % 2], BUDGETS[h // 2 % len(BUDGETS)]
            sid = last_sid if name == "continue" else str(db.start_session(
                tenant, agent_id="lme", context_window=128000, started_at=lme.parse_date(inst["question_date"])))
            timed = rows.setdefault((name, budget), {"first": [], "warm": [], "settled": []})
            timed["first"].append(compile_once(pooled, tenant, sid, inst["question"], budget))
            timed["warm"].append(compile_once(pooled, tenant, sid, inst["question"], budget))
            conv.run_jobs(conn)
            timed["settled"].append(compile_once(pooled, tenant, sid, inst["question"], budget))
            print(f"history {h + 1}/{len(picked)}: {n} turns written in {time.perf_counter() - t0:.1f} s;"
                  f" {name} at {budget}: first {timed['first'][-1][0]:.0f} ms, warm {timed['warm'][-1][0]:.0f} ms",
                  file=sys.stderr, flush=True)
    out: dict = {"histories": len(picked), "per_call": {}}
    print(f"\n{'call':9} {'budget':>6} {'n':>2} | {'first ms':>8} {'pack':>5} | {'warm ms':>7} {'pack':>5}"
          f" | {'settled ms':>10} {'pack':>5} | first/warm")
    for (name, budget), timed in sorted(rows.items()):
        fig = {"n": len(timed["first"])}
        for when_ in ("first", "warm", "settled"):
            fig[f"{when_}_p50"] = round(statistics.median(x for x, _ in timed[when_]), 1)
            fig[f"{when_}_pack_p50"] = round(statistics.median(p for _, p in timed[when_]), 1)
        fig["first_over_warm"] = round(fig["first_p50"] / fig["warm_p50"], 2)
        out["per_call"][f"{name}@{budget}"] = fig
        print(f"{name:9} {budget:>6} {fig['n']:>2} | {fig['first_p50']:>8} {fig['first_pack_p50']:>5}"
              f" | {fig['warm_p50']:>7} {fig['warm_pack_p50']:>5} | {fig['settled_p50']:>10}"
              f" {fig['settled_pack_p50']:>5} | {fig['first_over_warm']}")
    for when_ in ("first", "warm", "settled"):
        xs = [x for timed in rows.values() for x, _ in timed[when_]]
        out[when_] = {"p50": round(statistics.median(xs), 1), "p95": round(conv.pct(xs, 0.95), 1)}
    out["first_over_warm_p50"] = round(out["first"]["p50"] / out["warm"]["p50"], 2)
    out["first_over_warm_p95"] = round(out["first"]["p95"] / out["warm"]["p95"], 2)
    print(f"all: first p50 {out['first']['p50']} / p95 {out['first']['p95']} ms, warm {out['warm']['p50']} /"
          f" {out['warm']['p95']}, settled {out['settled']['p50']} / {out['settled']['p95']};"
          f" first / warm {out['first_over_warm_p50']} (p50), {out['first_over_warm_p95']} (p95)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
