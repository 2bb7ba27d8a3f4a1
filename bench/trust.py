"""make bench-trust: the reliability suite (issue 20), one JSON line at the end.

Parts (bench/trust/<part>.py, each ``run(dsn, args) -> dict``), in this order:
  isolation  a role bound to tenant A calls every routine and touches every table
             and partition with B's ids; leaks counted (goal 0)
  fuzz       hypothesis over every API entry point; outcome is success or a project
             SQLSTATE, then the consistency checks
  secrets    every secret kind planted through every write path, then every column,
             artifact, compile output and the server log scanned (goal 0 found)
  load       32 clients x 300 mixed operations (32 tenants; one tenant, 8 sessions):
             errors, p50/p95 per operation, queue drain time, backend RSS, cold compile
  crash      concurrent writers and SIGKILL of the postmaster (local cluster only):
             every acknowledged write present exactly once, jobs resume, restart works
  http_isolation  every endpoint of the proxy, its HTTP API and MCP over HTTP x every
             way of naming a tenant (keys, body, header, ids): leaks (goal 0), cells
             not as expected (goal 0)
  http_fuzz  hostile HTTP requests at the same surfaces: 5xx other than 503,
             tracebacks, answers not in the surface's error shape (goal 0 each)
After each part, the sweeps' and pg_cron's failed runs in its window are listed, and
one fails the part (bench/trust/background.py).

Usage: bench/trust.py [--parts isolation,fuzz,...] [--fuzz-examples N] [--kills N]
Environment: DATABASE_URL (the Makefile sets it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

from mnemosyne import default_dsn

PARTS = ("isolation", "fuzz", "secrets", "load", "crash", "http_isolation", "http_fuzz")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset of " + ", ".join(PARTS))
    ap.add_argument("--fuzz-examples", type=int, default=100_000, help="fuzz inputs in all (default 100000)")
    ap.add_argument("--kills", type=int, default=10, help="postmaster SIGKILLs in the crash part")
    ap.add_argument("--clients", type=int, default=32, help="concurrent clients in the load part")
    ap.add_argument("--ops", type=int, default=300, help="operations per client in the load part")
    ap.add_argument("--http-fuzz-requests", type=int, default=20_000, help="requests of the http_fuzz part")
    args = ap.parse_args()
    dsn = default_dsn()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from trust import background
    results: dict[str, object] = {}
    ok = True
    for part in [p.strip() for p in args.parts.split(",") if p.strip()]:
        if part not in PARTS:
            ap.error(f"unknown part {part!r}; one of {', '.join(PARTS)}")
        print(f"\n== bench-trust: {part} ==", flush=True)
        t0 = time.monotonic()
        module = importlib.import_module(f"trust.{part}")
        since = background.server_now(dsn)
        figures = module.run(dsn, args)
        figures["seconds"] = round(time.monotonic() - t0, 1)
        # a sweep or job that failed beside the part fails it (issue 46)
        failed = background.failed_runs(dsn, since, crashes=part == "crash")
        figures["background_failures"] = failed
        for f in failed:
            print(f"  FAILED in the background: {f['runs']} x {f['job']} ({f['where']}): {f['error']}", flush=True)
        print(f"{part}: {sum(f['runs'] for f in failed)} failed background runs", flush=True)
        ok = ok and figures.get("passed", False) and not failed
        figures["passed"] = figures.get("passed", False) and not failed
        results[part] = figures
    print(json.dumps({"bench": "trust", "passed": ok, **results}, sort_keys=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
