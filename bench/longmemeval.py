"""LongMemEval_S evidence in compile_context's context and recall@k, beside the baselines
(make bench-longmemeval).

bench-locomo's protocol on another kind of conversation: user-assistant chats, one
user's ~50 dated sessions (~500 turns) per question, the turns holding the answer's
evidence labelled (`has_answer`). The data: longmemeval_s_dev120.json.xz in
shared/bench/longmemeval/ beside the checkout or beside the worktrees' folder (its
README gives the fields), or --data PATH, a file of the same format (.json or
.json.xz).

Per question, one tenant (bench/conversations.py does the shared part):
- every haystack session is started at its date and its turns recorded 30 s apart
  from it (sessions in date order; empty turns are not recorded); the job runner
  embeds them and the turns are sealed into retrieval segments;
- turns alone: the question is compiled in a session started at the question's date
  (compile_context's "now") at 512 ... 8k tokens; the figure is the share of the
  question's evidence turns inside the context at full or detail fidelity (mean over
  questions). One compile with a large budget gives the ranking (the report's rank,
  as bench-locomo's recall@k): recall_any@k (some evidence turn in the top k) and
  recall_all@k (every one), k = 5, 10. The baselines on the same turns are
  bench-locomo's (the last turns, pure vector top-k, pure full-text top-k: ts_rank
  over an OR of the question's lexemes) and Okapi BM25 over the question's own
  haystack (conversations.bm25_ranking);
- with memories: the extract job, run by the job runner, turns every session into
  memories, and the question is compiled again at every budget in a new session at
  the question's date; a memory in the context holds the turns it was extracted from.

Progress goes to stderr; tables to stdout, ending with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import sys
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import conversations as conv  # bench/conversations.py, shared with bench/locomo.py
import psycopg

from mnemosyne import connect

DATA = conv.shared_data("bench", "longmemeval", "longmemeval_s_dev120.json.xz")
TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
         "multi-session", "knowledge-update", "temporal-reasoning")
KS = (5, 10)
BASELINES = (*conv.BASELINES, "bm25")
RANKINGS = ("mnemosyne", "bm25", "fts", "vector")  # the recall table's rows
AGENT = "longmemeval"


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load(path: str | Path) -> list[dict]:
    path = Path(path)
    with (lzma.open(path) if path.suffix == ".xz" else open(path, "rb")) as f:
        return json.load(f)


def parse_date(text: str) -> datetime:
    """LongMemEval's '2023/05/30 (Tue) 14:26', as UTC."""
    day, _, clock = text.split(" ")
    return datetime.strptime(f"{day} {clock}", "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def select(data: list[dict], n: int, types: tuple[str, ...] = ()) -> list[dict]:
    """n questions spread over the types (the file's order within a type), one type
    after another; n = 0: all of them. types: only questions of these types (none
    given: every type); a type the data lacks is an error, not an empty run."""
    unknown = sorted(set(types) - {inst["question_type"] for inst in data})
    if unknown:
        raise ValueError(f"no questions of type {', '.join(unknown)} in the data")
    by_type = defaultdict(list)
    for inst in data:
        if not types or inst["question_type"] in types:
            by_type[inst["question_type"]].append(inst)
    order = [t for t in TYPES if t in by_type] + sorted(set(by_type) - set(TYPES))
    out = []
    for i in range(max(len(v) for v in by_type.values()) if by_type else 0):
        out.extend(by_type[t][i] for t in order if i < len(by_type[t]))
    return out[:n] if n else out


def sessions_of(inst: dict) -> list[tuple[datetime, list[tuple[dict, str, dict]]]]:
    """The haystack as conv.record_sessions takes it, in date order: a turn's key is
    '<session position in the file>:<turn position>'."""
    sessions = []
    for s, (when, turns) in enumerate(zip(inst["haystack_dates"], inst["haystack_sessions"], strict=True)):
        sessions.append((parse_date(when), [
            ({"role": t["role"], "content": t["content"]}, f"{s}:{j}", {"lme_turn": f"{s}:{j}"})
            for j, t in enumerate(turns) if t["content"].strip()]))
    return sorted(sessions, key=lambda x: x[0])


def evidence_of(inst: dict) -> set[str]:
    return {f"{s}:{j}" for s, turns in enumerate(inst["haystack_sessions"])
            for j, t in enumerate(turns) if t.get("has_answer")}


class Bench:
    """The figures of the questions run so far."""

    def __init__(self, prefix: str, recall_index: bool = False, base=None, digests: bool = True):
        # base: a client on another build's server code (conversations.baseline_client),
        # whose compiles with memories are scored as "with_memories_base"; digests: the
        # digests sweep runs after formation (conversations.form_memories)
        self.prefix, self.recall_index, self.base, self.digests = prefix, recall_index, base, digests
        self.scores = conv.Scores()
        self.latencies = {"turns": [], "with_memories": []} | ({"with_memories_base": []} if base else {})
        self.mem_items = defaultdict(list)    # budget -> [memory items in the context]
        self.mem_item_tokens = defaultdict(list)  # budget -> [their tokens]
        self.block_tokens = defaultdict(list)  # budget -> [the memory block's tokens, with memories]
        # probe -> [(the block's tokens in a 128k window with no budget, its memory items,
        # the share of the evidence turns in that context: the question's only)]
        self.window = {"question": [], "short": []}
        self.types: Counter = Counter()
        self.memories: list[int] = []
        self.extraction = Counter()
        self.turns = 0
        self.ingest_s = 0.0
        self.skipped: list[str] = []

    def tenant(self, inst: dict) -> str:
        return f"{self.prefix}_{inst['question_id']}"

    def run(self, db, conn: psycopg.Connection, inst: dict) -> None:
        """Records one question's haystack in its own tenant and evaluates it, turns
        alone and then with memories."""
        tenant, qtype = self.tenant(inst), inst["question_type"]
        t0 = time.perf_counter()
        ids = conv.record_sessions(db, tenant, sessions_of(inst), agent_id=AGENT)
        conv.seal(conn, [tenant], self.recall_index)
        self.ingest_s += time.perf_counter() - t0
        self.turns += len(ids)
        evidence = evidence_of(inst) & set(ids.values())
        if not evidence:  # nothing to find: not scored (and said so in the report)
            self.skipped.append(inst["question_id"])
            return
        self.types[qtype] += 1
        asked = parse_date(inst["question_date"])
        question = inst["question"]
        sid = db.start_session(tenant, agent_id=AGENT, context_window=128000, started_at=asked)
        self.compiles(db, tenant, sid, question, qtype, evidence, ids, "turns", None, inst.get("answer"))
        ranked = conv.ranked_keys(db, tenant, sid, question, ids)
        for k in KS:
            self.scores.add("mnemosyne", f"@{k}", qtype, evidence, set(ranked[:k]))
        conv.score_baselines(self.scores, conn, tenant, question, qtype, evidence, ids, conv.tenant_turns(conn, tenant),
                             KS, names=BASELINES)

        formed = conv.form_memories(conn, [tenant], log=log, digests=self.digests)
        self.memories.append(formed["memories"])
        self.extraction.update({k: formed[k] for k in ("messages", "candidates", "memories", "failed_jobs", "digests")})
        self.extraction["seconds"] += formed["seconds"]
        sid = db.start_session(tenant, agent_id=AGENT, context_window=128000, started_at=asked)
        sources = conv.memory_sources(conn, tenant)
        self.compiles(db, tenant, sid, question, qtype, evidence, ids, "with_memories", sources, inst.get("answer"))
        if self.base is not None:
            base_sid = self.base.start_session(tenant, agent_id=AGENT, context_window=128000, started_at=asked)
            self.compiles(self.base, tenant, base_sid, question, qtype, evidence, ids, "with_memories_base",
                          sources, inst.get("answer"))
        self.window["question"].append(conv.block_at_window(db, tenant, sid, question, ids, sources, evidence))
        self.window["short"].append(conv.block_at_window(db, tenant, sid, conv.SHORT_QUESTION))

    def compiles(self, db, tenant, sid, question, qtype, evidence, ids, phase, sources, answer=None) -> None:
        method = "mnemosyne" if phase == "turns" else phase
        for b in conv.BUDGETS:
            t = time.perf_counter()
            bundle = db.compile_context_bundle(tenant, sid, question, budget=b, log=False)
            self.latencies[phase].append((time.perf_counter() - t) * 1000)
            report = bundle["report"]
            self.scores.add_answer(method, str(b), bundle, answer)
            self.scores.add(method, str(b), qtype, evidence, conv.context_keys(report, ids, sources),
                            report["tokens"]["total"])
            if phase == "with_memories":
                n, tokens = conv.memory_items(report)
                self.mem_items[b].append(n)
                self.mem_item_tokens[b].append(tokens)
                self.block_tokens[b].append(report["tokens"]["memory"])

    # ---------------------------------------------------------------- figures

    def recall(self, method: str, cats) -> dict:
        s = self.scores
        return {f"{kind}@{k}": s.mean(method, f"@{k}", cats, table)
                for k in KS for kind, table in (("any", s.any), ("all", s.full))}

    def figures(self) -> dict:
        s, cats = self.scores, tuple(self.types)

        def by_budget(method, cs=cats, table=None):
            return {str(b): s.mean(method, str(b), cs, table) for b in conv.BUDGETS}

        def mean(xs):
            return round(statistics.fmean(xs), 2) if xs else 0.0

        n = sum(self.types.values())
        base = ("with_memories_base",) if self.base is not None else ()
        return {
            "questions": n, "per_type": dict(self.types), "skipped_no_evidence": self.skipped,
            "evidence_share": {"turns": by_budget("mnemosyne"), "with_memories": by_budget("with_memories")}
            | {m: by_budget(m) for m in (*base, *BASELINES)},
            "all_evidence": {"turns": by_budget("mnemosyne", table=s.full),
                             "with_memories": by_budget("with_memories", table=s.full)}
            | {m: by_budget(m, table=s.full) for m in base},
            "recall": {m: self.recall(m, cats) for m in RANKINGS},
            "by_type": {t: {"evidence_share": {"turns": by_budget("mnemosyne", (t,)),
                                               "with_memories": by_budget("with_memories", (t,))}
                            | {m: by_budget(m, (t,)) for m in base},
                            "recall": {m: self.recall(m, (t,)) for m in RANKINGS}}
                        for t in cats},
            "tokens": {"turns": {str(b): s.mean_tokens("mnemosyne", str(b)) for b in conv.BUDGETS}}
            | {m: {str(b): s.mean_tokens(m, str(b)) for b in conv.BUDGETS} for m in ("with_memories", *base)},
            "memory_items_per_compile": {str(b): mean(self.mem_items[b]) for b in conv.BUDGETS},
            "memory_item_tokens_per_compile": {str(b): mean(self.mem_item_tokens[b]) for b in conv.BUDGETS},
            "memory_block_tokens_per_compile": {str(b): mean(self.block_tokens[b]) for b in conv.BUDGETS},
            "answer_in_context": {m: {str(b): s.answer_share(m, str(b)) for b in conv.BUDGETS}
                                  for m in ("mnemosyne", "with_memories", *base)},
            "answer_questions": len(s.answer[("mnemosyne", str(conv.BUDGETS[0]))]),
            "tokens_per_evidence_turn": {m: {str(b): s.tokens_per_evidence(m, str(b)) for b in conv.BUDGETS}
                                         for m in ("mnemosyne", "with_memories", *base)},
            "block_at_128k_window": conv.window_figures(self.window),
            "memories_per_question": mean(self.memories),
            "extraction": dict(self.extraction) | {"seconds": round(self.extraction["seconds"], 1)},
            "latency_ms": {p: {"p50": round(conv.pct(xs, .5), 2), "p95": round(conv.pct(xs, .95), 2), "compiles": len(xs)}
                           for p, xs in self.latencies.items()},
            "ingest": {"turns": self.turns, "seconds": round(self.ingest_s, 1),
                       "turns_per_s": round(self.turns / self.ingest_s, 1) if self.ingest_s else 0.0},
            "recall_index": self.recall_index,
        }


def print_tables(f: dict) -> None:
    es = f["evidence_share"]
    print(f"\nShare of evidence turns in the context ({f['questions']} questions: "
          + ", ".join(f"{t} {n}" for t, n in f["per_type"].items()) + ")")
    cols = ("turns", "with_memories", *BASELINES)
    print(f"{'budget':>8} " + " ".join(f"{c:>14}" for c in cols) + f" {'all in: turns':>14} {'memories':>9}")
    for b in map(str, conv.BUDGETS):
        print(f"{b:>8} " + " ".join(f"{es[c][b]:>14.3f}" for c in cols)
              + f" {f['all_evidence']['turns'][b]:>14.3f} {f['all_evidence']['with_memories'][b]:>9.3f}")
    keys = list(f["recall"]["mnemosyne"])
    print("\nRecall over the ranking (any: some evidence turn in the top k; all: every one)")
    print(f"{'':>34} " + " ".join(f"{k:>7}" for k in keys))
    for scope, rec in [("all types", f["recall"])] + [(t, v["recall"]) for t, v in f["by_type"].items()]:
        for m, r in rec.items():
            print(f"{scope:>25} {m:>8} " + " ".join(f"{r[k]:>7.3f}" for k in keys))
    print("\nPer type: evidence share turns alone -> with memories")
    for t, v in f["by_type"].items():
        e = v["evidence_share"]
        print(f"{t:>25} " + " ".join(f"{b}:{e['turns'][b]:.3f}->{e['with_memories'][b]:.3f}" for b in e["turns"]))
    print("\nPer compile, mean: tokens used (turns alone / with memories), memory items and their tokens,"
          " the memory block's tokens")
    for b in map(str, conv.BUDGETS):
        print(f"{b:>8} {f['tokens']['turns'][b]:>8.0f} / {f['tokens']['with_memories'][b]:>6.0f}"
              f"   items {f['memory_items_per_compile'][b]:>5.2f} ({f['memory_item_tokens_per_compile'][b]:>6.1f}"
              f" tokens)   block {f['memory_block_tokens_per_compile'][b]:>6.1f}")
    tpe = f["tokens_per_evidence_turn"]
    print("Tokens sent per evidence turn found (turns alone / with memories): " + ", ".join(
        f"{b} {tpe['mnemosyne'][b]} / {tpe['with_memories'][b]}" for b in map(str, conv.BUDGETS)))
    aic = f["answer_in_context"]
    print(f"Gold answer's words in the context's text ({f['answer_questions']} short answers;"
          " turns alone / with memories): " + ", ".join(
              f"{b} {aic['mnemosyne'][b]:.3f} / {aic['with_memories'][b]:.3f}" for b in map(str, conv.BUDGETS)))
    if "with_memories_base" in es:
        bs, ba, bt = es["with_memories_base"], aic["with_memories_base"], tpe["with_memories_base"]
        print("The baseline build, with memories (evidence share, gold answer in the context, tokens per"
              " evidence turn): " + ", ".join(f"{b} {bs[b]:.3f} / {ba[b]:.3f} / {bt[b]}" for b in map(str, conv.BUDGETS)))
    w = f["block_at_128k_window"]
    print(f"Memory block in the whole 128k window, no budget: the question {w['question']['tokens']:.0f} tokens"
          f" ({w['question']['items']:.2f} items, max {w['question']['max_tokens']},"
          f" evidence {w['question'].get('evidence', 0):.3f}); "
          f"{conv.SHORT_QUESTION!r} {w['short']['tokens']:.0f} tokens ({w['short']['items']:.2f} items,"
          f" max {w['short']['max_tokens']})")
    lat, ing = f["latency_ms"], f["ingest"]
    print(f"\nmemories formed per question: {f['memories_per_question']}"
          f"; compile p50 / p95: turns alone {lat['turns']['p50']:.1f} / {lat['turns']['p95']:.1f} ms,"
          f" with memories {lat['with_memories']['p50']:.1f} / {lat['with_memories']['p95']:.1f} ms"
          f"; ingest {ing['turns']} turns in {ing['seconds']} s ({ing['turns_per_s']} turns/s)")
    if f["skipped_no_evidence"]:
        print(f"not scored (no evidence turn recorded): {f['skipped_no_evidence']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DATA, help="a LongMemEval file (.json or .json.xz)")
    ap.add_argument("--questions", type=int, default=0,
                    help="how many questions, spread over the types (default: all)")
    ap.add_argument("--types", default="",
                    help="comma-separated question types to run (default: all), e.g. multi-session;"
                         " --questions is then spread over these")
    ap.add_argument("--recall-index", action="store_true",
                    help="give every tenant a recall index (a large tenant's read path) before evaluating")
    ap.add_argument("--baseline-plpy", default="",
                    help="a copy of another build's plpy/ (e.g. main's): its compiles with memories are"
                         " scored beside this build's, on the same tenants (with_memories_base)")
    ap.add_argument("--no-digests", action="store_true",
                    help="leave the digests sweep out (it runs after formation, as pg_cron would)")
    args = ap.parse_args()
    if args.data is None or not Path(args.data).exists():
        sys.exit(f"no LongMemEval data at {args.data}: pass --data PATH")
    try:
        chosen = select(load(args.data), args.questions, tuple(t.strip() for t in args.types.split(",") if t.strip()))
    except ValueError as e:
        sys.exit(str(e))
    base = conv.baseline_client(conv.DSN, args.baseline_plpy) if args.baseline_plpy else None
    bench = Bench(f"lme_{uuid.uuid4().hex[:6]}", args.recall_index, base, not args.no_digests)
    t0 = time.perf_counter()
    with connect(conv.DSN) as db, psycopg.connect(conv.DSN, autocommit=True) as conn, conv.jobs_paused(conn, "mnemo-%"):
        for i, inst in enumerate(chosen, 1):
            t = time.perf_counter()
            turns_before = bench.turns
            bench.run(db, conn, inst)
            elapsed = time.perf_counter() - t0
            log(f"question {i}/{len(chosen)} {inst['question_id']} ({inst['question_type']}):"
                f" {bench.turns - turns_before} turns in {time.perf_counter() - t:.1f} s;"
                f" ingest {bench.turns / bench.ingest_s:.0f} turns/s; {elapsed:.0f} s so far,"
                f" ~{elapsed / i * (len(chosen) - i):.0f} s left")
    figures = bench.figures()
    figures["data"] = Path(args.data).name
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    print_tables(figures)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
