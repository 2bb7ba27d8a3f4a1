"""LoCoMo evidence recall of compile_context against three baselines (make bench-locomo).

Protocol (../shared/bench/README.md): per conversation, every session is recorded in
order as messages with their timestamps (speaker as the message name, speaker A as
`user`, speaker B as `assistant`); the job runner embeds them. Then each question
gets a fresh session and one compile per budget (512 ... 8k tokens); a question's
evidence turn counts as recalled when it is in the context at full or detail
fidelity. recall@k uses the k best-ranked items (the report's rank: the order packing
values them in) of one compile with a large budget.

Baselines, on the same rows in the same run: the last turns that fit the budget,
pure vector top-k (cosine on the same embeddings), pure full-text top-k (ts_rank
over an OR of the question's lexemes). Baselines are charged only the messages' own
token counts, which is cheaper than compile_context's labelled memory lines.

With memories (issue 4), in the same run on the same tenants: after the turns-alone
evaluation, the extract job turns every session into memories (offline rules), and
compile_context is evaluated again at 1k and 2k. A memory in the context recalls the
dia_ids of the messages it was extracted from (its source_message_ids), at full or
detail fidelity like a turn. The JSON line gains "with_memories".

--recall-index: every tenant gets a recall index (mnemo_internal.sync_recall_index,
what the segments sweep gives a tenant past recall_index_min_messages) once its turns
are sealed, so that its compiles read a large tenant's way: the k nearest and k best
lexical items with their neighbour turns, not the whole history. A LoCoMo
conversation (~600 turns) is then several times k at the small budgets: a run with
and one without it show whether that read loses evidence (issue 27).

Prints per-category tables and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import uuid
from collections import defaultdict
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg

from mnemosyne import connect, default_dsn, importers

DSN = default_dsn()
# LOCOMO_JSON, else shared/bench/ beside the checkout or beside the worktrees' folder
DATA = os.environ.get("LOCOMO_JSON") or str(next(
    (p / "shared" / "bench" / "locomo" / "locomo10.json" for p in Path(__file__).resolve().parents
     if (p / "shared" / "bench" / "locomo" / "locomo10.json").exists()), "locomo10.json"))
BUDGETS = (512, 1024, 2048, 4096, 8192)
MEMORY_BUDGETS = (1024, 2048)
KS = (5, 10, 25, 50)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def norm_evidence(items: list[str]) -> list[str]:
    """Normalise evidence ids: 'D8:6; D9:17' -> two ids, 'D:11:26' -> D11:26, 'D30:05' -> D30:5."""
    out = []
    for e in items:
        for part in re.split(r"[;,\s]+", e):
            m = re.match(r"D:?(\d+):0*(\d+)$", part.strip())
            if m:
                out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


def ingest(db, sample: dict, tenant: str) -> dict[int, str]:
    """Records the conversation; returns message_id -> dia_id."""
    conv = sample["conversation"]
    ids: dict[int, str] = {}
    # Turns alone first: extraction runs later, in main(), after that evaluation.
    db.create_tenant(tenant, config={"formation": {"method": "off"}})
    for _, when, turns in importers.locomo_sessions(conv):
        sid = db.start_session(tenant, agent_id="locomo", context_window=128000, started_at=when)
        for i, t in enumerate(turns):
            mid = db.record_message(
                tenant, sid, importers.locomo_message(conv, t),
                created_at=when + timedelta(seconds=30 * i), metadata={"dia_id": t["dia_id"]})
            ids[mid] = t["dia_id"]
    return ids


def run_jobs(conn: psycopg.Connection) -> None:
    while conn.execute("SELECT count(*) FROM mnemo.jobs WHERE status = 'queued'").fetchone()[0]:
        conn.execute("CALL mnemo.run_jobs(p_batch_size => 64, p_max_batches => 50)")


@contextmanager
def jobs_paused(conn: psycopg.Connection):
    """pg_cron's job runner paused while the bench runs the jobs itself, and resumed."""
    conn.execute("UPDATE cron.job SET active = false WHERE jobname = 'mnemo-run-jobs'")
    try:
        yield
    finally:
        conn.execute("UPDATE cron.job SET active = true WHERE jobname = 'mnemo-run-jobs'")


def ingest_all(db, conn: psycopg.Connection, data: list[dict], prefix: str,
               recall_index: bool = False) -> list[tuple[dict, str, dict[int, str]]]:
    """Each conversation recorded as tenant <prefix>_<sample_id>, embedded, and sealed
    into retrieval segments as pg_cron's 'segments' sweep would within a minute (with
    recall_index, each tenant also gets the recall index that sweep gives a tenant past
    recall_index_min_messages): [(sample, tenant, message_id -> dia_id)]."""
    tenants = []
    for sample in data:
        tenant = f"{prefix}_{sample['sample_id']}"
        ids = ingest(db, sample, tenant)
        tenants.append((sample, tenant, ids))
        print(f"ingested {sample['sample_id']}: {len(ids)} turns", flush=True)
    run_jobs(conn)
    for _, tenant, _ in tenants:
        conn.execute("SELECT mnemo_internal.build_message_segments(%s)", (tenant,))
        if recall_index:
            conn.execute("SELECT mnemo_internal.sync_recall_index(%s, 1)", (tenant,))
    return tenants


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


class Scores:
    """Evidence recall per (method, setting), per category."""

    def __init__(self):
        self.recall = defaultdict(list)   # (method, setting, category) -> [fraction]
        self.full = defaultdict(list)     # ... -> [all evidence in: 0/1]
        self.tokens = defaultdict(list)   # (method, setting) -> [tokens used]

    def add(self, method: str, setting: str, cat: int, evidence: set[str], got: set[str],
            tokens: int | None = None) -> None:
        hit = len(evidence & got) / len(evidence)
        self.recall[(method, setting, cat)].append(hit)
        self.full[(method, setting, cat)].append(1.0 if hit == 1.0 else 0.0)
        if tokens is not None:
            self.tokens[(method, setting)].append(tokens)

    def mean(self, method: str, setting: str, cats=(1, 2, 3, 4), table=None) -> float:
        xs = [x for c in cats for x in (table or self.recall)[(method, setting, c)]]
        return round(statistics.fmean(xs), 4) if xs else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=10, help="how many of the 10 to use")
    ap.add_argument("--questions", type=int, default=0, help="limit questions per conversation")
    ap.add_argument("--recall-index", action="store_true",
                    help="give every tenant a recall index (a large tenant's read path) before evaluating")
    args = ap.parse_args()
    with open(DATA) as f:
        data = json.load(f)[: args.conversations]
    run = uuid.uuid4().hex[:6]
    scores = Scores()
    latencies: list[float] = []
    with connect(DSN) as db, psycopg.connect(DSN, autocommit=True) as conn, jobs_paused(conn):
        t0 = time.perf_counter()
        tenants = ingest_all(db, conn, data, f"locomo_{run}", args.recall_index)
        print(f"ingest + embeddings + segments: {time.perf_counter() - t0:.1f} s", flush=True)
        for sample, tenant, ids in tenants:
            evaluate(db, conn, sample, tenant, ids, scores, latencies, args.questions)
            print(f"evaluated {sample['sample_id']}", flush=True)
        formation = extract_memories(conn, [t for _, t, _ in tenants])
        for sample, tenant, ids in tenants:
            evaluate_memories(db, conn, sample, tenant, ids, scores, args.questions)
            print(f"evaluated {sample['sample_id']} with memories", flush=True)
    return report(scores, latencies, formation, args.recall_index)


def extract_memories(conn: psycopg.Connection, tenants: list[str]) -> dict:
    """Turns every session of these tenants into memories with the extract job."""
    t0 = time.perf_counter()
    conn.execute("UPDATE mnemo.tenants SET config = config - 'formation' WHERE tenant_id = ANY(%s)", (tenants,))
    conn.execute(
        "SELECT mnemo_internal.enqueue_job(tenant_id, 'extract', 'session:' || session_id,"
        " jsonb_build_object('session_id', session_id)) FROM mnemo.sessions"
        " WHERE tenant_id = ANY(%s) AND turn_count > 0", (tenants,))
    run_jobs(conn)
    seconds = time.perf_counter() - t0
    n_msgs, n_mem, n_log = conn.execute(
        "SELECT (SELECT count(*) FROM mnemo.messages WHERE tenant_id = ANY(%(t)s)),"
        " (SELECT count(*) FROM mnemo.memories WHERE tenant_id = ANY(%(t)s)),"
        " (SELECT count(*) FROM mnemo.admission_log WHERE tenant_id = ANY(%(t)s))", {"t": tenants}).fetchone()
    failed = conn.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = ANY(%s) AND status = 'failed'",
                          (tenants,)).fetchone()[0]
    print(f"extraction: {n_msgs} messages -> {n_log} candidates -> {n_mem} memories in {seconds:.1f} s"
          f" ({n_msgs / seconds:.0f} messages/s; {failed} failed jobs)", flush=True)
    return {"messages": n_msgs, "candidates": n_log, "memories": n_mem, "seconds": round(seconds, 1),
            "messages_per_s": round(n_msgs / seconds, 1), "failed_jobs": failed}


def scorable(sample: dict, known: set[str], limit: int) -> list[tuple[dict, set[str]]]:
    """(question, its evidence among the recorded turns) for the scorable questions."""
    qs = [q for q in sample["qa"] if set(norm_evidence(q.get("evidence", []))) & known]
    return [(q, set(norm_evidence(q["evidence"])) & known) for q in (qs[:limit] if limit else qs)]


def evaluate_memories(db, conn, sample, tenant, ids, scores, limit) -> None:
    """compile_context at 1k / 2k with the extracted memories present."""
    sources = {r[0]: r[1] for r in conn.execute(
        "SELECT memory_id, source_message_ids FROM mnemo.memories WHERE tenant_id = %s", (tenant,))}
    for q, evidence in scorable(sample, set(ids.values()), limit):
        sid = db.start_session(tenant, agent_id="locomo", context_window=128000)
        for b in MEMORY_BUDGETS:
            bundle = db.compile_context_bundle(tenant, sid, q["question"], budget=b, log=False)
            got = set()
            for i in bundle["report"]["items"]:
                if i["fidelity"] not in ("full", "detail"):
                    continue
                kind, num = i["source"][:4], int(i["source"][4:])
                if kind == "msg:" and num in ids:
                    got.add(ids[num])
                elif kind == "mem:":
                    got.update(ids[m] for m in sources.get(num, ()) if m in ids)
            scores.add("with_memories", str(b), q["category"], evidence, got,
                       bundle["report"]["tokens"]["total"])


def evaluate(db, conn, sample, tenant, ids, scores, latencies, limit) -> None:
    dia_of = ids
    turns = conn.execute(
        "SELECT message_id, token_count FROM mnemo.messages WHERE tenant_id = %s"
        " ORDER BY created_at, turn_index", (tenant,)).fetchall()
    for q, evidence in scorable(sample, set(dia_of.values()), limit):
        cat = q["category"]
        question = q["question"]
        sid = db.start_session(tenant, agent_id="locomo", context_window=128000)
        # compile_context at each budget
        for b in BUDGETS:
            t = time.perf_counter()
            bundle = db.compile_context_bundle(tenant, sid, question, budget=b, log=False)
            latencies.append((time.perf_counter() - t) * 1000)
            got = {dia_of[int(i["source"][4:])] for i in bundle["report"]["items"]
                   if i["source"].startswith("msg:") and i["fidelity"] in ("full", "detail")
                   and int(i["source"][4:]) in dia_of}
            scores.add("mnemosyne", str(b), cat, evidence, got, bundle["report"]["tokens"]["total"])
        bundle = db.compile_context_bundle(tenant, sid, question, budget=1_000_000,
                                           caps={"items": max(KS)}, log=False)
        ranked = sorted((i for i in bundle["report"]["items"] if i["section"] == "memory"),
                        key=lambda i: i["rank"])
        ranked_ids = [dia_of.get(int(i["source"][4:])) for i in ranked if i["source"].startswith("msg:")]
        for k in KS:
            scores.add("mnemosyne", f"@{k}", cat, evidence, set(ranked_ids[:k]))
        # baselines
        vec = [r[0] for r in conn.execute(
            "SELECT message_id FROM mnemo.messages WHERE tenant_id = %s AND embedding IS NOT NULL"
            " ORDER BY embedding <=> mnemo.embed(%s) LIMIT 400", (tenant, question))]
        fts = [r[0] for r in conn.execute(
            "SELECT message_id FROM mnemo.messages, "
            " (SELECT replace(plainto_tsquery('english', %s)::text, '&', '|') AS q) AS x"
            " WHERE tenant_id = %s AND x.q <> '' AND search_tsv @@ x.q::tsquery"
            " ORDER BY ts_rank(search_tsv, x.q::tsquery) DESC, message_id LIMIT 400",
            (question, tenant))]
        last = [r[0] for r in reversed(turns)]
        cost = dict(turns)
        for name, ranking in (("last_n", last), ("vector", vec), ("fts", fts)):
            for k in KS:
                scores.add(name, f"@{k}", cat, evidence, {dia_of[m] for m in ranking[:k]})
            for b in BUDGETS:
                used, got = 0, set()
                for m in ranking:
                    if used + cost[m] > b:
                        if name == "last_n":
                            break
                        continue
                    used += cost[m]
                    got.add(dia_of[m])
                scores.add(name, str(b), cat, evidence, got, used)


def report(scores: Scores, latencies: list[float], formation: dict | None = None,
           recall_index: bool = False) -> int:
    methods = ("mnemosyne", "last_n", "vector", "fts")
    settings = [str(b) for b in BUDGETS] + [f"@{k}" for k in KS]
    print("\nEvidence recall without category 5 (with category 5 in brackets)")
    print(f"{'setting':>8} " + " ".join(f"{m:>17}" for m in methods))
    for s in settings:
        cells = [f"{scores.mean(m, s):.3f} [{scores.mean(m, s, (1, 2, 3, 4, 5)):.3f}]" for m in methods]
        print(f"{s:>8} " + " ".join(f"{c:>17}" for c in cells))
    print("\nAll evidence in (share of questions, without category 5)")
    for s in settings:
        print(f"{s:>8} " + " ".join(f"{scores.mean(m, s, table=scores.full):>17.3f}" for m in methods))
    print("\nPer category, mnemosyne")
    for c, name in CATEGORIES.items():
        print(f"  {c} {name:<12} " + " ".join(
            f"{s}:{scores.mean('mnemosyne', s, (c,)):.3f}" for s in settings))
    print("\nTokens used (mean)")
    for s in [str(b) for b in BUDGETS]:
        print(f"{s:>8} " + " ".join(
            f"{statistics.fmean(scores.tokens[(m, s)]):>17.0f}" for m in methods))
    print(f"\ncompile_context latency: p50 {pct(latencies, .5):.1f} ms, p95 {pct(latencies, .95):.1f} ms"
          f" over {len(latencies)} compiles")
    beat = all(scores.mean("mnemosyne", s) > scores.mean(m, s)
               for s in settings for m in ("last_n", "vector", "fts"))
    print(f"beats every baseline at every budget and k: {beat}")

    def fig(m: str) -> dict:
        return {"budget_recall": {str(b): scores.mean(m, str(b)) for b in BUDGETS},
                "recall_at": {str(k): scores.mean(m, f"@{k}") for k in KS}}

    line = fig("mnemosyne")
    line["baselines"] = {m: fig(m) for m in ("last_n", "vector", "fts")}
    if formation is not None:
        print("\nWith extracted memories (without category 5): turns alone -> with memories")
        wm = {}
        for b in MEMORY_BUDGETS:
            before, after = scores.mean("mnemosyne", str(b)), scores.mean("with_memories", str(b))
            print(f"{b:>8} {before:.3f} -> {after:.3f} ({100 * (after - before):+.1f} points)")
            wm[str(b)] = {"turns": before, "memories": after, "delta_points": round(100 * (after - before), 1)}
        wm["extraction"] = formation
        line["with_memories"] = wm
    line["recall_index"] = recall_index
    line["latency_p50_ms"] = round(pct(latencies, .5), 2)
    line["latency_p95_ms"] = round(pct(latencies, .95), 2)
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
