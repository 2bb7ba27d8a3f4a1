"""bench-trust, fuzz: Hypothesis over every API function (the strategies and harness of
tests/py/fuzz_api.py, the functions read from the catalog) with >= args.fuzz_examples
inputs (default 100k), then the consistency checks of tests/py/consistency.py over the
fuzzed tenants. Every call must end in success or a project SQLSTATE (class MN).

Prints progress every chunk, then the figures: inputs, outcomes per function,
non-project errors (by function, SQLSTATE and message, with an example input each),
consistency violations. Passed: no non-project error and no violation.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "py"))

from consistency import violations
from fuzz_api import Fuzzer, drive

CHUNK = 2_000


def run(dsn: str, args) -> dict:
    examples = args.fuzz_examples
    with psycopg.connect(dsn, autocommit=True) as conn:
        fuzzer = Fuzzer(conn, tenants=8, sessions=4)
        print(f"fuzz: {examples} inputs over {len(fuzzer.api)} API functions, tenants {fuzzer.pool.prefix}*",
              flush=True)
        t0 = time.monotonic()
        done = 0
        while done < examples:
            n = min(CHUNK, examples - done)
            drive(fuzzer, n)
            done += n
            f = fuzzer.figures()
            elapsed = time.monotonic() - t0
            print(f"  {f['inputs']:>7} inputs  {elapsed:7.0f} s  {f['inputs'] / elapsed:5.1f}/s  "
                  f"outcomes {f['outcomes']}  findings {f['findings']}", flush=True)
        seconds = time.monotonic() - t0
        found = violations(fuzzer.conn, fuzzer.pool.like)
        fuzzer.drop_queued_jobs()
    figures = fuzzer.figures()
    kinds = Counter((x.function, x.sqlstate, x.message[:80]) for x in fuzzer.findings)
    examples_by_kind = {}
    for x in fuzzer.findings:
        examples_by_kind.setdefault((x.function, x.sqlstate, x.message[:80]), x)
    findings = [{"function": k[0], "sqlstate": k[1], "message": k[2], "count": n,
                 "example": {a: (v[:200] if isinstance(v, str) else v)
                             for a, v in examples_by_kind[k].args.items()}}
                for k, n in kinds.most_common()]
    print(f"fuzz: {figures['inputs']} inputs in {seconds:.0f} s ({figures['inputs'] / seconds:.1f}/s)")
    for name, counts in figures["per_function"].items():
        print(f"  {name:<24} {dict(counts)}")
    print(f"non-project errors: {figures['findings']}")
    for f in findings:
        print(f"  {f['count']:>5} x {f['function']} {f['sqlstate']} {f['message']}\n        e.g. {f['example']}")
    print(f"consistency violations: {sum(len(v) for v in found.values())} {found or ''}")
    compiles = sorted(x for name in ("compile_context", "compile_context_bundle")
                      for x in fuzzer.durations.get(name, []))
    compile_ms = {"calls": len(compiles)} | ({
        "p50": round(1000 * compiles[len(compiles) // 2], 1),
        "p99": round(1000 * compiles[min(len(compiles) - 1, int(0.99 * len(compiles)))], 1),
        "max": round(1000 * compiles[-1], 1)} if compiles else {})
    print(f"compiles: {compile_ms}")
    tenants = len(fuzzer.pool.tenants)
    return {"passed": not findings and not found, "inputs": figures["inputs"], "seconds_fuzzing": round(seconds, 1),
            "inputs_per_s": round(figures["inputs"] / seconds, 1), "outcomes": figures["outcomes"],
            "per_function": figures["per_function"], "non_project_errors": figures["findings"],
            "findings": findings[:20], "tenants": tenants, "compile_ms": compile_ms,
            "consistency_violations": {k: [list(map(str, r)) for r in v] for k, v in found.items()}}
