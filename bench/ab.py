"""make bench-ab: is a change to compile_context the same context, and faster?

Compares two or more trees of the plpy/ package (e.g. a worktree of main and the
working tree) on the bench-context corpus (build it first: make bench-context):

1. Same output: the same (tenant, session, query) samples through each tree at several
   budgets with logging off (a logged compile becomes the next one's previous context,
   so the second tree would see the first one's row); counts the compiles whose
   messages are not byte-identical to the first tree's, and the candidates per compile.
2. Speed (after loading the corpus into shared buffers, as bench-context does): each
   tree in its own warm backend, plus the floor of bench-context (the query
   embedding and one bare KNN), interleaved per sample in a rotating order so that noise
   on this shared machine hits every figure alike; p50/p95/p99 and the ratio to the floor.
   Each backend loads its own copy of the model, so the figures run higher than
   bench-context's single backend: compare the trees with each other, not with it.

A tree is loaded in its backend before the first compile: after mnemo_internal.py_bootstrap
(which puts the deployed copy first on sys.path), the mnemo_db modules are dropped and
imported again from the tree, and the tree's Compiler is made the backend's (GD), so the
deployed compile_context bodies run it whatever module they import (a tree from before
mnemo_db/compile/ has its Compiler in mnemo_db/context_db.py). Only plpy/ differs: SQL
and migrations are the database's.

Usage: bench/ab.py [--samples N] [--budgets 1000,4000,8000] [--same N] NAME=PLPY_DIR ...
   e.g. git worktree add /tmp/main main
        bench/ab.py main=/tmp/main/plpy new=plpy
Ends with one JSON line: {"same": {...}, "timing": {NAME: {p50_ms, p95_ms, p99_ms, ratio_p95}}}.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import context as bench  # bench/context.py: the corpus, the floor, percentiles
from context_corpus import SWEEP_PREFIX

LOAD_TREE = """DO $load$
import importlib
import sys
plpy.execute("SELECT mnemo_internal.py_bootstrap()")
for name in [m for m in sys.modules if m == "mnemo_db" or m.startswith("mnemo_db.")]:
    del sys.modules[name]
sys.path.insert(0, $tree)
compiler = importlib.import_module($module)
if not compiler.__file__.startswith($tree + "/"):
    plpy.error("the server imported " + compiler.__file__ + ", not the tree at " + $tree
               + ": can the server's OS user read it?")
GD["mnemo_compiler"] = compiler.Compiler(plpy)
$load$ LANGUAGE plpython3u"""

# Where a plpy/ tree keeps its Compiler: today's layout, then the one before it.
COMPILER_MODULES = (("mnemo_db/compile/compiler.py", "mnemo_db.compile.compiler"),
                    ("mnemo_db/context_db.py", "mnemo_db.context_db"))


def compiler_module(tree: str) -> str:
    """The module that holds the tree's Compiler."""
    for path, module in COMPILER_MODULES:
        if (Path(tree) / path).is_file():
            return module
    sys.exit(f"{tree}: not a plpy/ tree (no {' or '.join(path for path, _ in COMPILER_MODULES)})")


def connect(tree: str | None = None) -> psycopg.Connection:
    """An autocommit connection without server-side prepares (as bench-context's); with a
    tree, compile_context in its backend runs that tree's code."""
    conn = psycopg.connect(bench.DSN, autocommit=True, prepare_threshold=None)
    if tree is not None:
        path = str(Path(tree).resolve())
        module = compiler_module(path)
        conn.execute(LOAD_TREE.replace("$tree", repr(path)).replace("$module", repr(module)))
    return conn


def corpus_samples(conn, n: int, seed: int, prefix: str = bench.PREFIX) -> list[tuple[str, str, str]]:
    """n samples of the bench corpus (its tenants named prefix...): a random (tenant,
    session) and a distinct LoCoMo question each (the questions repeat only past their
    number)."""
    rng = random.Random(seed)
    sessions: dict[str, list[str]] = {}
    for t, s in conn.execute("SELECT tenant_id, session_id::text FROM mnemo.sessions "
                             "WHERE tenant_id LIKE %s ORDER BY 1, 2", (prefix.replace("_", "\\_") + "%",)):
        sessions.setdefault(t, []).append(s)
    if not sessions:
        sys.exit("no bench corpus: run make bench-context first")
    tenants = sorted(sessions)
    questions = bench.locomo_questions(json.loads(bench.LOCOMO.read_text()))
    rng.shuffle(questions)
    out = []
    for i in range(n):
        t = rng.choice(tenants)
        out.append((t, rng.choice(sessions[t]), questions[i % len(questions)]))
    return out


def same_output(conns: dict[str, psycopg.Connection], samples, budgets: list[int]) -> dict:
    """Per budget: compiles whose messages differ from the first tree's, and candidates."""
    first = next(iter(conns))
    out = {}
    for budget in budgets:
        options = json.dumps({"budget": budget, "log": False})
        differ = {name: 0 for name in conns}
        candidates = {name: 0 for name in conns}
        for t, s, q in samples:
            bundles = {name: c.execute("SELECT mnemo.compile_context_bundle(%s, %s, %s, %s)",
                                       (t, s, q, options)).fetchone()[0] for name, c in conns.items()}
            for name, b in bundles.items():
                differ[name] += b["messages"] != bundles[first]["messages"]
                candidates[name] += b["report"]["provenance"]["candidate_pool_size"]
        out[str(budget)] = {name: {"differ": differ[name], "candidates": round(candidates[name] / len(samples), 1)}
                            for name in conns}
        print(f"[same] budget {budget}: " + "; ".join(
            f"{name} differs in {v['differ']}/{len(samples)}, {v['candidates']} candidates"
            for name, v in out[str(budget)].items()), flush=True)
    return out


def timing(conns: dict[str, psycopg.Connection], floor_conn, samples, warmup: int) -> dict:
    """Interleaved, rotating per sample: each tree's compile (logged, as in production) and the floor."""
    def compile_with(conn):
        def run(t, s, q):
            conn.execute("SELECT mnemo.compile_context(%s, %s, %s, %s)", (t, s, q, bench.OPTIONS)).fetchone()
        return run

    def floor(t, s, q):
        floor_conn.execute(bench.FLOOR, (t, q)).fetchall()

    ops = [(name, compile_with(c)) for name, c in conns.items()] + [("floor", floor)]
    times: dict[str, list[float]] = {name: [] for name, _ in ops}
    for i, sample in enumerate(samples):
        k = i % len(ops)
        for name, op in ops[k:] + ops[:k]:
            t0 = time.perf_counter()
            op(*sample)
            if i >= warmup:
                times[name].append((time.perf_counter() - t0) * 1000)
        if (i + 1) % 200 == 0:
            print(f"[timing] {i + 1}/{len(samples)} samples", flush=True)
    floor_p95 = bench.pct(times["floor"], 95)
    out = {}
    print(f"\n{'':12}{'p50':>9}{'p95':>9}{'p99':>9}{'mean':>9}  ms   ratio p95 to the floor")
    for name, v in times.items():
        row = {"p50_ms": round(bench.pct(v, 50), 2), "p95_ms": round(bench.pct(v, 95), 2),
               "p99_ms": round(bench.pct(v, 99), 2), "mean_ms": round(sum(v) / len(v), 2)}
        if name != "floor":
            row["ratio_p95"] = round(row["p95_ms"] / floor_p95, 3)
        out[name] = row
        print(f"{name:12}{row['p50_ms']:9.2f}{row['p95_ms']:9.2f}{row['p99_ms']:9.2f}{row['mean_ms']:9.2f}"
              + (f"  {row['ratio_p95']:.3f}" if "ratio_p95" in row else ""))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+", metavar="NAME=PLPY_DIR")
    ap.add_argument("--samples", type=int, default=1000, help="timed samples (default 1000)")
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--same", type=int, default=200, help="samples per budget for the output check (0: skip)")
    ap.add_argument("--budgets", default="1000,4000,8000")
    ap.add_argument("--seed", type=int, default=20240612)
    ap.add_argument("--tenant-prefix", default=bench.PREFIX,
                    help=f"the corpus' tenants (default {bench.PREFIX}; {SWEEP_PREFIX}: the size sweep's, "
                         f"{SWEEP_PREFIX}100000_: its largest)")
    args = ap.parse_args()
    trees = []
    for arg in args.trees:
        name, sep, path = arg.partition("=")
        if not sep or not name or not path:
            sys.exit(f"expected NAME=PLPY_DIR, got {arg!r}")
        trees.append((name, path))
    conns = {name: connect(path) for name, path in trees}
    floor_conn = connect()
    bench.prewarm(floor_conn)  # as bench-context: otherwise the first tree to reach a tenant pays its reads
    samples = corpus_samples(floor_conn, max(args.samples + args.warmup, args.same), args.seed, args.tenant_prefix)
    same = same_output(conns, samples[:args.same], [int(b) for b in args.budgets.split(",")]) \
        if args.same and len(conns) > 1 else {}
    figures = timing(conns, floor_conn, samples[:args.samples + args.warmup], args.warmup)
    print(json.dumps({"same": same, "timing": figures}))


if __name__ == "__main__":
    main()
