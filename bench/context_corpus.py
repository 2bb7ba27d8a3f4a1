"""bench/context.py's corpus: a multi-tenant corpus of real text (LoCoMo's turns and
observations, the shared seed documents), embedded for real once per distinct text,
loaded with COPY a batch of tenants per transaction; and the size sweep's tenants.
See bench/context.py's docstring, part 1."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plpy"))
from mnemo_db import tokens
from mnemo_db.compile.levels import message_levels

from mnemosyne import default_dsn

DSN = default_dsn()
# the shared data beside the checkout (MNEMO_SHARED where the checkout lies deeper, e.g. a worktree)
SHARED = Path(os.environ.get("MNEMO_SHARED") or ROOT.parent / "shared")
LOCOMO = SHARED / "bench" / "locomo" / "locomo10.json"
SEEDS = SHARED / "seeds"
PREFIX = "bench_"
SEED = 20240611
BATCH_TENANTS = 20
HISTORY_DAYS = 180  # messages are spread over the last six months
OPTIONS = '{"budget": 4000}'
NULL = "\\N"  # COPY text format
# The size sweep (--sizes): tenants of each size, named benchsz_<size>_<k> (outside
# the main corpus' bench_ prefix), SWEEP_TENANTS of each (at least 1), memories at
# 10 % of the messages; each row's vector one of VARIANTS near-copies of its text's
# (cosine ~0.97 to it: VARIANT_NOISE per dimension of a unit vector).
SWEEP_PREFIX = "benchsz_"
SWEEP_MESSAGES = 100_000  # per size: tenants = this / size, between 1 and 20
VARIANTS, VARIANT_NOISE = 8, 0.012

# The HNSW indexes of 0001_schema.sql, exactly (dropped and rebuilt around a big load).
HNSW = {
    "mnemo.messages": ("messages_embedding_hnsw_idx", (
        "CREATE INDEX IF NOT EXISTS messages_embedding_hnsw_idx ON mnemo.messages "
        "USING hnsw (embedding vector_cosine_ops) WHERE embedding IS NOT NULL")),
    "mnemo.memories": ("memories_embedding_hnsw_idx", (
        "CREATE INDEX IF NOT EXISTS memories_embedding_hnsw_idx ON mnemo.memories "
        "USING hnsw (embedding vector_cosine_ops) WHERE is_active AND embedding IS NOT NULL")),
}

# --------------------------------------------------------------------------- texts


def _turns(conv: dict) -> list[tuple[str, str]]:
    keys = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)),
                  key=lambda k: int(k.split("_")[1]))
    return [(t["speaker"], t["text"].strip()) for k in keys for t in conv[k]
            if isinstance(t, dict) and (t.get("text") or "").strip()]


def _facts(sample: dict) -> list[tuple[str, str]]:
    """Memory-like statements: observations, events, session summary sentences."""
    out = []
    for per_speaker in (sample.get("observation") or {}).values():
        for speaker, items in per_speaker.items():
            for it in items:
                text = it[0] if isinstance(it, list) else it
                if isinstance(text, str) and text.strip():
                    out.append((speaker, text.strip()))
    for ev in (sample.get("event_summary") or {}).values():
        for speaker, items in ev.items():
            if speaker != "date" and isinstance(items, list):
                out.extend((speaker, t.strip()) for t in items if isinstance(t, str) and t.strip())
    conv = sample["conversation"]
    for summary in (sample.get("session_summary") or {}).values():
        for sentence in re.split(r"(?<=[.!?])\s+", summary or ""):
            if len(sentence.split()) >= 6:
                who = next((s for s in (conv["speaker_a"], conv["speaker_b"]) if s in sentence),
                           conv["speaker_a"])
                out.append((who, sentence.strip()))
    return out


def _seed_lines() -> list[str]:
    lines = []
    for f in sorted(SEEDS.glob("*.txt")):
        for line in f.read_text(errors="replace").splitlines():
            line = line.strip()
            if 8 <= len(line.split()) <= 80 and not line.startswith(("|", "```", "CREATE", "--")):
                lines.append(line)
    return lines


def locomo_questions(data: list[dict]) -> list[str]:
    """The distinct questions of the LoCoMo samples, in the file's order."""
    return list(dict.fromkeys(q["question"] for s in data for q in s["qa"]
                              if isinstance(q.get("question"), str)))


class Pool:
    """Distinct real texts with their real embeddings, grouped per conversation."""

    def __init__(self, recombinations: int):
        data = json.loads(LOCOMO.read_text())
        self.texts: list[str] = []
        self.speakers: list[str | None] = []
        index: dict[str, int] = {}

        def add(speaker, text):
            if text not in index:
                index[text] = len(self.texts)
                self.texts.append(text)
                self.speakers.append(speaker)
            return index[text]

        rng = random.Random(SEED)
        self.turns, self.recombs, self.facts, self.people = [], [], [], []
        convs = [_turns(s["conversation"]) for s in data]
        per_conv = recombinations // len(convs)
        for sample, turns in zip(data, convs, strict=True):
            self.people.append((sample["conversation"]["speaker_a"],
                                sample["conversation"]["speaker_b"]))
            self.turns.append([add(s, t) for s, t in turns])
            rec = []
            for _ in range(per_conv):
                i = rng.randrange(len(turns))
                j = (i + rng.randint(2, 40)) % len(turns)
                rec.append(add(turns[i][0], turns[i][1] + " " + turns[j][1]))
            self.recombs.append(rec)
        self.seeds = [add(None, t) for t in _seed_lines()]
        for sample in data:
            self.facts.append([add(s, t) for s, t in _facts(sample)])
        self.questions = locomo_questions(data)
        self.vectors: np.ndarray | None = None
        self._variants: dict[tuple[int, int], str] = {}

    def digest(self) -> str:
        return hashlib.sha256("\x00".join(self.texts).encode()).hexdigest()[:16]

    def embed(self, home: Path) -> None:
        cache = home / "bench" / f"context_pool_{self.digest()}.npy"
        if cache.exists():
            self.vectors = np.load(cache)
            print(f"[pool] {len(self.texts)} distinct texts, embeddings from {cache}")
            return
        from mnemo_db.embedding import Embedder

        emb = Embedder(str(home / "model"), threads=os.cpu_count() or 1)
        t0 = time.perf_counter()
        out = []
        step = 1024
        for start in range(0, len(self.texts), step):
            out.append(emb.embed(self.texts[start:start + step]))
            done = start + len(out[-1])
            rate = done / (time.perf_counter() - t0)
            print(f"[pool] embedded {done}/{len(self.texts)} texts ({rate:.0f}/s)", flush=True)
        self.vectors = np.concatenate(out)
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, self.vectors)
        print(f"[pool] {len(self.texts)} texts embedded in {time.perf_counter() - t0:.1f} s")

    def variant(self, p: int, v: int) -> str:
        """Text p's vector, near-copy v (deterministic), as COPY text."""
        key = (p, v)
        if key not in self._variants:
            rng = np.random.default_rng([SEED, p, v])
            x = self.vectors[p] + rng.normal(0, VARIANT_NOISE, self.vectors.shape[1]).astype(np.float32)
            x /= np.linalg.norm(x)
            self._variants[key] = "[" + ",".join(f"{y:.6g}" for y in x.tolist()) + "]"
        return self._variants[key]

    def prepare_rows(self) -> None:
        """Per-text COPY fields, computed once and reused by every row."""
        t0 = time.perf_counter()
        self.vec = ["[" + ",".join(f"{x:.7g}" for x in v.tolist()) + "]" for v in self.vectors]
        self.esc = [_esc(t) for t in self.texts]
        self.msg_tokens = [tokens.count_message({"role": "user", "content": t, "name": s})
                           for t, s in zip(self.texts, self.speakers, strict=True)]
        self.msg_hash = ["\\\\x" + hashlib.sha256(t.encode()).hexdigest() for t in self.texts]
        print(f"[pool] row fields prepared in {time.perf_counter() - t0:.1f} s")


def _esc(s: str) -> str:
    return (s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


def _ts(d: datetime) -> str:
    return d.strftime("%Y-%m-%d %H:%M:%S.%f+00")


# --------------------------------------------------------------------------- corpus


def tenant_id(i: int) -> str:
    return f"{PREFIX}{i:05d}"


def generate(pool: Pool, i: int, n_msg: int, n_mem: int, now: datetime, out: dict,
             tid: str | None = None, distinct: bool = False) -> None:
    """Rows of tenant i (deterministic), appended as COPY text lines to out[table]:
    tenant_id(i), or `tid`. distinct: each row's vector is one of its text's
    VARIANTS near-copies rather than the text's own (a large tenant repeats its texts
    many times; identical vectors make ties that no index resolves as the exact
    scan does)."""
    rng = random.Random(SEED * 100_003 + i)
    tid = tid or tenant_id(i)

    def vec(p: int) -> str:
        return pool.variant(p, rng.randrange(VARIANTS)) if distinct else pool.vec[p]
    n_conv = len(pool.turns)
    conv = i % n_conv
    user, assistant = pool.people[conv]
    created = now - timedelta(days=HISTORY_DAYS + 5)
    out["tenants"].append(f"{tid}\t{user} (bench)\t{{}}\t{_ts(created)}")
    prompt = (f"You are {assistant}, {user}'s long-term companion assistant. Be warm and "
              f"concise, remember what {user} told you in earlier sessions, and answer with "
              "specific names and dates when you know them.")
    p_hash = hashlib.sha256(prompt.encode()).hexdigest()
    p_tokens = tokens.count_message({"role": "system", "content": prompt})
    out["system_prompts"].append(f"{tid}\t\\\\x{p_hash}\t{_esc(prompt)}\t{p_tokens}\t{_ts(created)}")

    k = rng.randint(3, 6)
    weights = [rng.uniform(0.5, 1.5) for _ in range(k)]
    sizes = [max(2, int(n_msg * w / sum(weights))) for w in weights]
    sizes[-1] += n_msg - sum(sizes)
    if sizes[-1] < 1:  # tiny corpora: give everything to one session
        sizes = [n_msg]
    starts = sorted(now - timedelta(days=3 + rng.uniform(0, HISTORY_DAYS - 5)) for _ in sizes)
    sessions = []
    for s_idx, (size, start) in enumerate(zip(sizes, starts, strict=True)):
        sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        c = conv if rng.random() < 0.7 else rng.randrange(n_conv)
        turns, recombs = pool.turns[c], pool.recombs[c]
        offset = rng.randrange(len(turns))
        t = start
        # Turns come 15-240 s apart (127.5 s on average), squeezed where a long session
        # would run past now: a history (and the memories formed from it) is in the
        # past. Future times made every compile of the size sweep's 100k tenant read
        # ~1,000 memories 'changed since the recall index's last sync'.
        squeeze = min(1.0, (now - timedelta(hours=1) - start).total_seconds() / (size * 127.5 * 1.05))
        for turn in range(size):
            r = rng.random()
            if r < 0.25:
                p = rng.choice(recombs)
            elif r < 0.27:
                p = rng.choice(pool.seeds)
            else:
                p = turns[(offset + turn) % len(turns)]
            role = "user" if turn % 2 == 0 else "assistant"
            name = pool.speakers[p] or NULL
            # what the message's embed job would have stored with its embedding
            levels = message_levels({"content": pool.texts[p], "role": role,
                                     "token_count": pool.msg_tokens[p], "created_at": t})
            out["messages"].append(
                f"{tid}\t{sid}\t{turn}\t{role}\t{pool.esc[p]}\t{name}\t"
                f"{pool.msg_tokens[p]}\t{pool.msg_hash[p]}\t{vec(p)}\t{_ts(t)}\t"
                f"{_esc(json.dumps(levels)) if levels else NULL}")
            t = min(t + timedelta(seconds=rng.uniform(15, 240) * squeeze), now - timedelta(minutes=1))
        status = "active" if s_idx == len(sizes) - 1 else "closed"
        out["sessions"].append(
            f"{tid}\t{sid}\t{status}\tgpt-4o\t128000\t4096\t\\\\x{p_hash}\t{p_tokens}\t{size}\t"
            f"{_ts(start)}\t{_ts(t)}")
        sessions.append((sid, start, t))

    facts = list(pool.facts[conv])
    rng.shuffle(facts)
    while len(facts) < n_mem:
        facts += rng.sample(pool.facts[rng.randrange(n_conv)], k=20)
    kinds = rng.choices(["fact", "preference", "decision", "note"], [50, 20, 10, 20], k=n_mem)
    for p, kind in zip(facts[:n_mem], kinds, strict=True):
        text = pool.texts[p]
        stub = text.split("\n", 1)[0][:160]
        sid, s_start, s_end = rng.choice(sessions)
        at = s_start + (s_end - s_start) * rng.random()
        tier = "semantic" if kind in ("fact", "preference") else "episodic"
        prov = {"fact": "fact", "preference": "preference"}.get(kind, "system_inferred")
        accesses = rng.randint(1, 25) if rng.random() < 0.3 else 0
        accessed = _ts(at + (now - at) * rng.random()) if accesses else NULL
        norm = re.sub(r"\s+", " ", text.strip()).lower()
        m_hash = "\\\\x" + hashlib.sha256(norm.encode()).hexdigest()
        who = pool.speakers[p]
        entities = "{" + who + "}" if who else "{}"
        # (without its memory_id, which load() draws from the sequence for the access row)
        out["memories"].append(
            f"{tid}\t{sid}\t{tier}\tglobal\t{kind}\t{pool.esc[p]}\t{_esc(stub)}\t"
            f"{tokens.count(text)}\t{tokens.count(stub)}\t{entities}\t{prov}\t"
            f"{rng.uniform(0.5, 0.95):.3f}\t{_ts(at)}\t{m_hash}\t"
            f"{vec(p)}\t{_ts(at)}\t{_ts(at)}")
        out["memory_access"].append(f"{tid}\t{accesses}\t{accessed}" if accesses else None)


COLUMNS = {
    "tenants": "tenant_id, display_name, config, created_at",
    "system_prompts": "tenant_id, prompt_hash, content, token_count, created_at",
    "sessions": "tenant_id, session_id, status, model, context_window, response_reserve, "
                "system_prompt_hash, system_prompt_tokens, turn_count, created_at, updated_at",
    "messages": "tenant_id, session_id, turn_index, role, content, name, token_count, "
                "content_hash, embedding, created_at, levels",
    "memories": "memory_id, tenant_id, session_id, tier, scope, kind, content_full, content_stub, "
                "tokens_full, tokens_stub, key_entities, provenance_type, confidence, "
                "valid_from, content_hash, embedding, created_at, updated_at",
    "memory_access": "memory_id, tenant_id, access_count, last_accessed_at",
}


def number_memories(cur, out: dict) -> None:
    """Gives the batch's memory lines their ids (from the table's sequence) and turns
    their access statistics into memory_access lines (memories never sent have none)."""
    ids = cur.execute("SELECT array_agg(nextval('mnemo.memories_memory_id_seq')) "
                      "FROM generate_series(1, %s)", (len(out["memories"]),)).fetchone()[0] or []
    out["memories"] = [f"{m}\t{line}" for m, line in zip(ids, out["memories"], strict=True)]
    out["memory_access"] = [f"{m}\t{line}" for m, line in zip(ids, out["memory_access"], strict=True)
                            if line is not None]


def copy_lines(cur, table: str, lines: list[str]) -> None:
    with cur.copy(f"COPY mnemo.{table} ({COLUMNS[table]}) FROM STDIN") as cp:
        buf, size = [], 0
        for line in lines:
            buf.append(line)
            size += len(line)
            if size > 4 << 20:
                cp.write("\n".join(buf) + "\n")
                buf, size = [], 0
        if buf:
            cp.write("\n".join(buf) + "\n")


def corpus_counts(conn) -> tuple[int, int, int, int]:
    """Bench tenants, messages, memories, and the memories still active: the hourly
    expiry sweep deactivates the corpus' unused episodic memories (~19 % of them) once
    they look idle, so figures taken before and after it are on different data."""
    like = PREFIX.replace("_", "\\_") + "%"
    return tuple(conn.execute(
        f"SELECT (SELECT count(*) FROM mnemo.{t} WHERE tenant_id LIKE %s)", (like,)
    ).fetchone()[0] for t in ("tenants", "messages", "memories")) + (conn.execute(
        "SELECT count(*) FROM mnemo.memories WHERE tenant_id LIKE %s AND is_active", (like,)
    ).fetchone()[0],)


def existing_tenants(conn) -> set[str]:
    like = PREFIX.replace("_", "\\_") + "%"
    return {r[0] for r in conn.execute(
        "SELECT tenant_id FROM mnemo.tenants WHERE tenant_id LIKE %s", (like,))}


def reset(conn) -> None:
    like = [p.replace("_", "\\_") + "%" for p in (PREFIX, SWEEP_PREFIX)]
    t0 = time.perf_counter()
    # the bench tenants' own recall indexes (their rows go with the tenants)
    for names in conn.execute("SELECT hnsw_index, memory_hnsw_index, gin_index FROM mnemo_internal.recall_tenants "
                              "WHERE tenant_id LIKE ANY(%s)", (like,)).fetchall():
        for name in names:
            conn.execute(sql.SQL("DROP INDEX IF EXISTS mnemo_internal.{}").format(sql.Identifier(name)))
    for table in ("context_log", "jobs", "lexicon", "message_segments", "memories", "messages",
                  "sessions", "system_prompts", "tenants"):
        n = conn.execute(f"DELETE FROM mnemo.{table} WHERE tenant_id LIKE ANY(%s)", (like,)).rowcount
        print(f"[reset] mnemo.{table}: {n} rows deleted")
    print(f"[reset] done in {time.perf_counter() - t0:.1f} s")


def ensure_partitions(conn, now: datetime) -> None:
    first = (now - timedelta(days=HISTORY_DAYS + 1)).date().replace(day=1)
    months = (now.year - first.year) * 12 + now.month - first.month + 1
    n = conn.execute("SELECT mnemo.create_message_partitions(%s, %s)", (first, months)).fetchone()[0]
    if n:
        print(f"[load] created {n} monthly message partitions from {first} ({months} months)")


def hnsw_present(conn) -> dict[str, bool]:
    return {t: conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"mnemo.{name}",)).fetchone()[0]
            for t, (name, _) in HNSW.items()}


def build_hnsw(conn) -> float:
    """Creates the HNSW indexes that are missing (definitions of 0001_schema.sql)."""
    total = 0.0
    for table, (name, ddl) in HNSW.items():
        if conn.execute("SELECT to_regclass(%s) IS NULL", (f"mnemo.{name}",)).fetchone()[0]:
            t0 = time.perf_counter()
            print(f"[index] building {name} on {table} ...", flush=True)
            conn.execute(ddl)
            dt = time.perf_counter() - t0
            total += dt
            print(f"[index] {name} built in {dt:.1f} s", flush=True)
    return total


def load(conn, pool_factory, args, now: datetime) -> dict:
    """Loads the tenants that are missing. Returns timings."""
    have = existing_tenants(conn)
    wanted = [i for i in range(1, args.tenants + 1) if tenant_id(i) not in have]
    timing = {"load_s": 0.0, "index_s": 0.0, "analyze_s": 0.0, "loaded_messages": 0}
    if have and args.tenants:
        n = conn.execute("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %s",
                         (tenant_id(min(int(t[len(PREFIX):]) for t in have)),)).fetchone()[0]
        if n != args.messages:
            sys.exit(f"existing bench tenants hold {n} messages each, not {args.messages}: "
                     "run with --reset first")
    if not wanted:
        timing["index_s"] = build_hnsw(conn)  # after an interrupted index build
        print(f"[load] corpus present: {len(have)} bench tenants, nothing to load")
        return timing
    pool = pool_factory()
    ensure_partitions(conn, now)
    rows = len(wanted) * args.messages
    rebuild = drop_hnsw_for_load(conn, rows, args.hnsw)
    print(f"[load] {len(wanted)} tenants to load ({rows} messages, "
          f"{len(wanted) * args.memories} memories), HNSW {'rebuilt after' if rebuild else 'kept'}",
          flush=True)
    t_start = time.perf_counter()
    done_msgs = done_mems = 0
    try:
        for b in range(0, len(wanted), BATCH_TENANTS):
            batch = wanted[b:b + BATCH_TENANTS]
            out = {t: [] for t in COLUMNS}
            t0 = time.perf_counter()
            for i in batch:
                generate(pool, i, args.messages, args.memories, now, out)
            t_gen = time.perf_counter() - t0
            t_copy, t_lexicon = insert_batch(conn, out, [tenant_id(i) for i in batch])
            done_msgs += len(out["messages"])
            done_mems += len(out["memories"])
            elapsed = time.perf_counter() - t_start
            rate = done_msgs / elapsed
            eta = (rows - done_msgs) / rate if rate else 0
            print(f"[load] tenants {len(have) + b + len(batch)}/{args.tenants}: "
                  f"{done_msgs} messages, {done_mems} memories in {elapsed:.0f} s "
                  f"({rate:.0f} messages/s; batch = generate {t_gen:.1f} s "
                  f"+ copy {t_copy:.1f} + lexicon {t_lexicon:.1f}); "
                  f"ETA {eta:.0f} s", flush=True)
        timing["load_s"] = time.perf_counter() - t_start
        timing["loaded_messages"] = done_msgs
    finally:
        timing["index_s"] = build_hnsw(conn)
    timing["analyze_s"] = vacuum_analyze(conn)
    print(f"[load] load {timing['load_s']:.1f} s, HNSW build {timing['index_s']:.1f} s, "
          f"VACUUM ANALYZE {timing['analyze_s']:.1f} s", flush=True)
    return timing


def drop_hnsw_for_load(conn, rows: int, mode: str) -> bool:
    """Drops the HNSW indexes before a load of `rows` messages when rebuilding them
    afterwards is cheaper (mode auto: >= 20k rows and >= 20 % of the table). Sets the
    session up for a bulk load. Returns whether they were dropped."""
    # Measured: 50k messages load at ~860 rows/s into live HNSW indexes, at ~5,600 rows/s
    # without them, plus ~13 s to build them afterwards. A rebuild covers the whole table,
    # so a small top-up of a big corpus keeps them.
    present = conn.execute("SELECT count(*) FROM mnemo.messages").fetchone()[0]
    rebuild = mode == "rebuild" or (mode == "auto" and rows >= 20_000 and rows >= 0.2 * present)
    conn.execute("SET synchronous_commit = off")
    conn.execute("SET maintenance_work_mem = '1GB'")
    if rebuild:
        for name, _ in HNSW.values():
            conn.execute(f"DROP INDEX IF EXISTS mnemo.{name}")
            print(f"[load] dropped {name} for the load (rebuilt afterwards)")
    return rebuild


def insert_batch(conn, out: dict, ids: list[str]) -> tuple[float, float]:
    """COPYs a batch of generated tenants in one transaction, with their BM25
    statistics (mnemo.lexicon). Returns the seconds of the copy and of the lexicon."""
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        number_memories(cur, out)
        for table in COLUMNS:
            copy_lines(cur, table, out[table])
        t_copy = time.perf_counter() - t0
        cur.execute("SELECT mnemo_internal.add_to_lexicon(array_agg(tenant_id), "
                    "array_agg(search_tsv)) FROM mnemo.messages WHERE tenant_id = ANY(%s)",
                    (ids,))
        cur.execute("SELECT mnemo_internal.add_to_lexicon(array_agg(tenant_id), "
                    "array_agg(search_tsv)) FROM mnemo.memories "
                    "WHERE tenant_id = ANY(%s) AND is_active", (ids,))
    return t_copy, time.perf_counter() - t0 - t_copy


def vacuum_analyze(conn) -> float:
    t0 = time.perf_counter()
    for table in ("tenants", "sessions", "system_prompts", "messages", "memories", "lexicon"):
        conn.execute(f"VACUUM (ANALYZE) mnemo.{table}")
    return time.perf_counter() - t0


def sweep_tenants(size: int) -> list[str]:
    return [f"{SWEEP_PREFIX}{size}_{k:02d}" for k in range(1, max(1, min(20, SWEEP_MESSAGES // size)) + 1)]


def load_sweep(conn, pool_factory, sizes: list[int], now: datetime, mode: str) -> None:
    """Loads the size sweep's missing tenants (sweep_tenants), ~20k messages a batch."""
    like = SWEEP_PREFIX.replace("_", "\\_") + "%"
    have = {r[0] for r in conn.execute("SELECT tenant_id FROM mnemo.tenants WHERE tenant_id LIKE %s", (like,))}
    wanted = [(size, k, tid) for size in sizes for k, tid in enumerate(sweep_tenants(size), 1) if tid not in have]
    if not wanted:
        build_hnsw(conn)  # after an interrupted index build
        print(f"[sweep] corpus present for sizes {sizes}")
        return
    pool = pool_factory()
    ensure_partitions(conn, now)
    rows = sum(size for size, _, _ in wanted)
    rebuild = drop_hnsw_for_load(conn, rows, mode)
    print(f"[sweep] {len(wanted)} tenants to load ({rows} messages), HNSW "
          f"{'rebuilt after' if rebuild else 'kept'}", flush=True)
    t_start, done = time.perf_counter(), 0
    try:
        batch: list[tuple[int, int, str]] = []
        for item in [*wanted, None]:
            if item is not None:
                batch.append(item)
            if batch and (item is None or sum(b[0] for b in batch) >= 20_000):
                out = {t: [] for t in COLUMNS}
                for size, k, tid in batch:
                    generate(pool, 1000 * size + k, size, size // 10, now, out, tid=tid, distinct=True)
                insert_batch(conn, out, [b[2] for b in batch])
                done += len(out["messages"])
                print(f"[sweep] {done}/{rows} messages in {time.perf_counter() - t_start:.0f} s", flush=True)
                batch = []
    finally:
        build_hnsw(conn)
    print(f"[sweep] VACUUM ANALYZE {vacuum_analyze(conn):.1f} s", flush=True)
