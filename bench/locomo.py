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
compile_context is evaluated again at 512, 1k and 2k. A memory in the context recalls the
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

import psycopg
from conversations import (  # bench/conversations.py, shared with bench/longmemeval.py
    BUDGETS,
    DSN,
    SHORT_QUESTION,
    Scores,
    baseline_client,
    block_at_window,
    context_keys,
    form_memories,
    jobs_paused,
    memory_sources,
    pct,
    ranked_keys,
    record_sessions,
    score_baselines,
    seal,
    shared_data,
    tenant_turns,
    window_figures,
)

from mnemosyne import connect, importers

# LOCOMO_JSON, else shared/bench/ beside the checkout or beside the worktrees' folder
DATA = os.environ.get("LOCOMO_JSON") or str(shared_data("bench", "locomo", "locomo10.json") or "locomo10.json")
MEMORY_BUDGETS = (512, 1024, 2048)
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
    # Turns alone first: extraction runs later, in main(), after that evaluation.
    return record_sessions(db, tenant, (
        (when, [(importers.locomo_message(conv, t), t["dia_id"], {"dia_id": t["dia_id"]}) for t in turns])
        for _, when, turns in importers.locomo_sessions(conv)), agent_id="locomo")


def ingest_all(db, conn: psycopg.Connection, data: list[dict], prefix: str,
               recall_index: bool = False) -> list[tuple[dict, str, dict[int, str]]]:
    """Each conversation recorded as tenant <prefix>_<sample_id>, embedded and sealed
    (conversations.seal): [(sample, tenant, message_id -> dia_id)]."""
    tenants = []
    for sample in data:
        tenant = f"{prefix}_{sample['sample_id']}"
        ids = ingest(db, sample, tenant)
        tenants.append((sample, tenant, ids))
        print(f"ingested {sample['sample_id']}: {len(ids)} turns", flush=True)
    seal(conn, [t for _, t, _ in tenants], recall_index)
    return tenants


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=10, help="how many of the 10 to use")
    ap.add_argument("--questions", type=int, default=0, help="limit questions per conversation")
    ap.add_argument("--recall-index", action="store_true",
                    help="give every tenant a recall index (a large tenant's read path) before evaluating")
    ap.add_argument("--baseline-plpy", default="",
                    help="a copy of another build's plpy/ (e.g. main's): its compiles with memories are"
                         " scored beside this build's, on the same tenants (with_memories_base)")
    ap.add_argument("--no-digests", action="store_true",
                    help="leave the digests sweep out (it runs after formation, as pg_cron would)")
    args = ap.parse_args()
    with open(DATA) as f:
        data = json.load(f)[: args.conversations]
    run = uuid.uuid4().hex[:6]
    scores = Scores()
    latencies: list[float] = []
    base = baseline_client(DSN, args.baseline_plpy) if args.baseline_plpy else None
    with connect(DSN) as db, psycopg.connect(DSN, autocommit=True) as conn, jobs_paused(conn, "mnemo-%"):
        t0 = time.perf_counter()
        tenants = ingest_all(db, conn, data, f"locomo_{run}", args.recall_index)
        print(f"ingest + embeddings + segments: {time.perf_counter() - t0:.1f} s", flush=True)
        for sample, tenant, ids in tenants:
            evaluate(db, conn, sample, tenant, ids, scores, latencies, args.questions)
            print(f"evaluated {sample['sample_id']}", flush=True)
        formation = extract_memories(conn, [t for _, t, _ in tenants], not args.no_digests)
        window = {"question": [], "short": []}
        for sample, tenant, ids in tenants:
            evaluate_memories(db, conn, sample, tenant, ids, scores, args.questions, window, base)
            print(f"evaluated {sample['sample_id']} with memories", flush=True)
    return report(scores, latencies, formation, args.recall_index, window_figures(window))


def extract_memories(conn: psycopg.Connection, tenants: list[str], digests: bool = True) -> dict:
    """Turns every session of these tenants into memories with the extract job (and,
    with digests, the digests sweep: conversations.form_memories)."""
    return form_memories(conn, tenants, log=lambda line: print(line, flush=True), digests=digests)


def scorable(sample: dict, known: set[str], limit: int) -> list[tuple[dict, set[str]]]:
    """(question, its evidence among the recorded turns) for the scorable questions."""
    qs = [q for q in sample["qa"] if set(norm_evidence(q.get("evidence", []))) & known]
    return [(q, set(norm_evidence(q["evidence"])) & known) for q in (qs[:limit] if limit else qs)]


def evaluate_memories(db, conn, sample, tenant, ids, scores, limit, window: dict, base=None) -> None:
    """compile_context at 512 / 1k / 2k with the extracted memories present (and on
    base, another build's server code, the same); and the memory
    block a whole 128k window takes, for each question and once for SHORT_QUESTION
    (window: probe -> [(tokens, items, evidence share: questions of categories 1-4)])."""
    sources = memory_sources(conn, tenant)
    for q, evidence in scorable(sample, set(ids.values()), limit):
        sid = db.start_session(tenant, agent_id="locomo", context_window=128000)
        base_sid = base.start_session(tenant, agent_id="locomo", context_window=128000) if base else None
        for b in MEMORY_BUDGETS:
            bundle = db.compile_context_bundle(tenant, sid, q["question"], budget=b, log=False)
            scores.add("with_memories", str(b), q["category"], evidence,
                       context_keys(bundle["report"], ids, sources), bundle["report"]["tokens"]["total"])
            if q["category"] != 5:
                scores.add_answer("with_memories", str(b), bundle, q.get("answer"))
            if base is not None:  # another build's server code (--baseline-plpy), same tenant and memories
                bundle = base.compile_context_bundle(tenant, base_sid, q["question"], budget=b, log=False)
                scores.add("with_memories_base", str(b), q["category"], evidence,
                           context_keys(bundle["report"], ids, sources), bundle["report"]["tokens"]["total"])
                if q["category"] != 5:
                    scores.add_answer("with_memories_base", str(b), bundle, q.get("answer"))
        window["question"].append(block_at_window(db, tenant, sid, q["question"], ids, sources,
                                                  evidence if q["category"] != 5 else None))
    sid = db.start_session(tenant, agent_id="locomo", context_window=128000)
    window["short"].append(block_at_window(db, tenant, sid, SHORT_QUESTION))


def evaluate(db, conn, sample, tenant, ids, scores, latencies, limit) -> None:
    turns = tenant_turns(conn, tenant)
    for q, evidence in scorable(sample, set(ids.values()), limit):
        cat = q["category"]
        question = q["question"]
        sid = db.start_session(tenant, agent_id="locomo", context_window=128000)
        # compile_context at each budget
        for b in BUDGETS:
            t = time.perf_counter()
            bundle = db.compile_context_bundle(tenant, sid, question, budget=b, log=False)
            latencies.append((time.perf_counter() - t) * 1000)
            scores.add("mnemosyne", str(b), cat, evidence, context_keys(bundle["report"], ids),
                       bundle["report"]["tokens"]["total"])
            if cat != 5:
                scores.add_answer("mnemosyne", str(b), bundle, q.get("answer"))
        ranked = ranked_keys(db, tenant, sid, question, ids)
        for k in KS:
            scores.add("mnemosyne", f"@{k}", cat, evidence, set(ranked[:k]))
        score_baselines(scores, conn, tenant, question, cat, evidence, ids, turns, KS)


def report(scores: Scores, latencies: list[float], formation: dict | None = None,
           recall_index: bool = False, window: dict | None = None) -> int:
    """The tables and the JSON line; window: the memory block a whole 128k window takes
    (conversations.window_figures), with memories."""
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
            print(f"{'':>8} tokens per evidence turn found: {scores.tokens_per_evidence('mnemosyne', str(b))}"
                  f" -> {scores.tokens_per_evidence('with_memories', str(b))}")
            wm[str(b)]["tokens_per_evidence_turn"] = {
                m: scores.tokens_per_evidence(m, str(b)) for m in ("mnemosyne", "with_memories")}
            wm[str(b)]["answer_in_context"] = {m: scores.answer_share(m, str(b)) for m in ("mnemosyne", "with_memories")}
            if scores.tokens[("with_memories_base", str(b))]:
                m = "with_memories_base"
                wm[str(b)]["base"] = {"memories": scores.mean(m, str(b)),
                                      "answer_in_context": scores.answer_share(m, str(b)),
                                      "tokens_per_evidence_turn": scores.tokens_per_evidence(m, str(b))}
                print(f"{'':>8} baseline build with memories: {wm[str(b)]['base']}")
            print(f"{'':>8} gold answer's words in the context ({len(scores.answer[('mnemosyne', str(b))])}"
                  f" short answers): {scores.answer_share('mnemosyne', str(b))}"
                  f" -> {scores.answer_share('with_memories', str(b))}")
        for probe, w in (window or {}).items():
            print(f"memory block in the whole 128k window, no budget ({probe}): {w['tokens']:.0f} tokens,"
                  f" {w['items']:.2f} items, max {w['max_tokens']}"
                  + (f", evidence {w['evidence']:.3f}" if "evidence" in w else ""))
        wm["block_at_128k_window"] = window or {}
        wm["extraction"] = formation
        line["with_memories"] = wm
    line["recall_index"] = recall_index
    line["latency_p50_ms"] = round(pct(latencies, .5), 2)
    line["latency_p95_ms"] = round(pct(latencies, .95), 2)
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
