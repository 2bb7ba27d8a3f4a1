"""What bench-locomo and bench-longmemeval share: dated conversations recorded one
tenant each, the job runner driven by the bench, memories formed by the extract job,
compiles at each token budget, the ranking behind recall@k, the baselines on the same
turns, and the scores.

A conversation's turn is keyed by the data set's own id (LoCoMo's dia_id, a
LongMemEval session and turn position): `ids` maps each recorded message_id to it,
and evidence is a set of such keys.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plpy"))
from mnemo_db.compile.retrieval import okapi

from mnemosyne import default_dsn

DSN = default_dsn()
BUDGETS = (512, 1024, 2048, 4096, 8192)
# The ranking behind recall@k: the report's ranks of one compile with a large budget,
# capped at this many items (bench-locomo's largest k)
RANK_DEPTH = 50
TURN_SECONDS = 30  # a session's turns are recorded this far apart from its start
BASELINES = ("last_n", "vector", "fts")  # bench-locomo's; bench-longmemeval adds "bm25"
BASELINE_DEPTH = 400  # how many turns of each ranking the baselines read


def shared_data(*parts: str) -> Path | None:
    """shared/<parts> beside the checkout or beside the worktrees' folder, if there."""
    rel = Path("shared", *parts)
    return next((p / rel for p in Path(__file__).resolve().parents if (p / rel).exists()), None)


# ------------------------------------------------------------------ recording and jobs


def record_sessions(db, tenant: str, sessions: Iterable[tuple[datetime, list[tuple[dict, str, dict]]]],
                    agent_id: str) -> dict[int, str]:
    """Creates the tenant with formation off (memories are formed later, by
    form_memories) and records each (started_at, [(message, key, metadata)]) session
    at its date, its turns TURN_SECONDS apart. Returns message_id -> key."""
    ids: dict[int, str] = {}
    db.create_tenant(tenant, config={"formation": {"method": "off"}})
    for when, turns in sessions:
        sid = db.start_session(tenant, agent_id=agent_id, context_window=128000, started_at=when)
        for i, (message, key, metadata) in enumerate(turns):
            mid = db.record_message(tenant, sid, message, created_at=when + timedelta(seconds=TURN_SECONDS * i),
                                    metadata=metadata)
            ids[mid] = key
    return ids


def run_jobs(conn: psycopg.Connection) -> None:
    while conn.execute("SELECT count(*) FROM mnemo.jobs WHERE status = 'queued'").fetchone()[0]:
        conn.execute("CALL mnemo.run_jobs(p_batch_size => 64, p_max_batches => 50)")


@contextmanager
def jobs_paused(conn: psycopg.Connection, jobs: str = "mnemo-run-jobs"):
    """pg_cron's job runner (or the jobs whose name is LIKE `jobs`) paused while the
    bench runs the jobs itself, then left as it was: resumed only if it was active
    (the test suite pauses it for its whole run, and a bench run from a test must not
    start it beside the tests)."""
    was = conn.execute("SELECT bool_or(active) FROM cron.job WHERE jobname LIKE %s", [jobs]).fetchone()[0]
    conn.execute("UPDATE cron.job SET active = false WHERE jobname LIKE %s", [jobs])
    try:
        yield
    finally:
        if was:
            conn.execute("UPDATE cron.job SET active = true WHERE jobname LIKE %s", [jobs])


def seal(conn: psycopg.Connection, tenants: list[str], recall_index: bool = False) -> None:
    """Runs the queued jobs (the embeddings) and seals the tenants' turns into retrieval
    segments as pg_cron's 'segments' sweep would within a minute; with recall_index,
    each tenant also gets the recall index that sweep gives a tenant past
    recall_index_min_messages."""
    run_jobs(conn)
    for tenant in tenants:
        conn.execute("SELECT mnemo_internal.build_message_segments(%s)", (tenant,))
        if recall_index:
            conn.execute("SELECT mnemo_internal.sync_recall_index(%s, 1)", (tenant,))


def form_memories(conn: psycopg.Connection, tenants: list[str], log=print, digests: bool = True) -> dict:
    """Turns every session of these tenants into memories with the extract job, run by
    the job runner; then, with digests, runs the digests sweep for each tenant as
    pg_cron would before the question is asked, and the jobs again (the digests'
    embeddings). Logs and returns the counts."""
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
    n_digests, digest_s = run_digests(conn, tenants) if digests else (0, 0.0)
    failed = conn.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = ANY(%s) AND status = 'failed'",
                          (tenants,)).fetchone()[0]
    log(f"extraction: {n_msgs} messages -> {n_log} candidates -> {n_mem} memories in {seconds:.1f} s"
        f" ({n_msgs / seconds:.0f} messages/s; {failed} failed jobs)"
        + (f"; {n_digests} digests in {digest_s:.1f} s" if digests else ""))
    return {"messages": n_msgs, "candidates": n_log, "memories": n_mem, "seconds": round(seconds, 1),
            "messages_per_s": round(n_msgs / seconds, 1), "failed_jobs": failed, "digests": n_digests}


def run_digests(conn: psycopg.Connection, tenants: list[str]) -> tuple[int, float]:
    """The digests sweep for each tenant, as pg_cron runs it, then the jobs (the
    digests' embeddings): (the tenants' active digests, seconds)."""
    t = time.perf_counter()
    for tenant in tenants:
        conn.execute("CALL mnemo.run_sweep('digests', p_tenant_id => %s)", (tenant,))
    run_jobs(conn)
    n = conn.execute("SELECT count(*) FROM mnemo.memories WHERE tenant_id = ANY(%s) AND is_active"
                     " AND source_key LIKE 'digest:%%'", (tenants,)).fetchone()[0]
    return n, time.perf_counter() - t


def memory_sources(conn: psycopg.Connection, tenant: str) -> dict[int, list[int]]:
    """memory_id -> the message_ids it was extracted from."""
    return {r[0]: r[1] for r in conn.execute(
        "SELECT memory_id, source_message_ids FROM mnemo.memories WHERE tenant_id = %s", (tenant,))}


def baseline_client(dsn: str, plpy_dir: str):
    """A client whose server backend runs another build's server code (a copy of its
    plpy/, e.g. main's) in place of the deployed one, for a before/after of a compile
    change on the same tenants and memories (--baseline-plpy). The python_path setting
    is pointed there in a transaction that the backend bootstraps in (py_bootstrap)
    and that is then rolled back: no other connection sees it, and this backend keeps
    that code for its life."""
    from mnemosyne.client import Client
    conn = psycopg.connect(dsn)
    rest = conn.execute("SELECT mnemo_internal.setting('python_path') #>> '{}'").fetchone()[0].split(":")[1:]
    conn.execute("UPDATE mnemo_internal.settings SET value = to_jsonb(%s::text) WHERE key = 'python_path'",
                 [":".join([plpy_dir, *rest])])
    conn.execute("SELECT mnemo_internal.py_bootstrap()")
    conn.execute("SELECT mnemo.embed('baseline check')")  # imports mnemo_db from there
    conn.rollback()
    conn.autocommit = True
    return Client(conn)


# ------------------------------------------------------------------ what a compile holds


def context_keys(report: dict, ids: dict[int, str], sources: dict[int, list[int]] | None = None) -> set[str]:
    """The keys of the turns a compile holds at full or detail fidelity; with
    sources, a memory item there also holds the turns it was extracted from."""
    got = set()
    for i in report["items"]:
        if i["fidelity"] not in ("full", "detail"):
            continue
        kind = i["source"][:4]
        if kind == "msg:" and int(i["source"][4:]) in ids:
            got.add(ids[int(i["source"][4:])])
        elif kind == "mem:" and sources is not None:
            got.update(ids[m] for m in sources.get(int(i["source"][4:]), ()) if m in ids)
    return got


def memory_items(report: dict) -> tuple[int, int]:
    """How many memory items (mem: sources) a compile holds, and their tokens."""
    mem = [i for i in report["items"] if i["source"].startswith("mem:")]
    return len(mem), sum(i["tokens"] for i in mem)


# Words an answer's check skips: a gold answer is in a context when its other words are there
ANSWER_STOPWORDS = frozenset({
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "for", "by", "with", "from",
    "is", "are", "was", "were", "be", "been", "it", "its", "this", "that", "as", "i", "my", "me",
    "you", "your", "he", "she", "his", "her", "they", "their", "we", "our", "not", "no", "also"})
ANSWER_MAX_WORDS = 6  # longer gold answers are descriptions (a preference rubric), not facts to find


def answer_words(answer) -> list[str] | None:
    """The content words of a short gold answer (lower case, stop words left out), or
    None when the answer is missing or longer than ANSWER_MAX_WORDS content words."""
    words = [w for w in re.findall(r"[a-z0-9]+", str(answer if answer is not None else "").lower())
             if w not in ANSWER_STOPWORDS]
    return words if 0 < len(words) <= ANSWER_MAX_WORDS else None


def answer_in_context(bundle: dict, words: list[str]) -> bool:
    """Whether every content word of a gold answer is in the text of the context's
    messages: as a whole word when it is 3 characters or fewer (a number, 'May'), else
    as part of one ('doctor' in 'doctors'). A memory that counts for its source turns
    (context_keys) without carrying what they say shows up here as a miss."""
    text = " ".join(m["content"] if isinstance(m.get("content"), str) else str(m.get("content") or "")
                    for m in bundle["messages"]).lower()
    tokens = set(re.findall(r"[a-z0-9]+", text))
    return all(w in tokens if len(w) <= 3 else w in text for w in words)


# A 16-character question with no tie to any memory: issue 42's probe of a block that
# fills whatever the window leaves (the proxy, for gpt-4o, sent ~11k tokens of memory)
SHORT_QUESTION = "Any suggestions?"


def block_at_window(db, tenant: str, sid, question: str, ids: dict[int, str] | None = None,
                    sources: dict[int, list[int]] | None = None, evidence: set[str] | None = None
                    ) -> tuple[int, int, float | None]:
    """The memory block's tokens and items when a question is compiled with no budget
    of its own, in the session's whole window (as the proxy compiles for a large
    model): the budget is a cap, and a block this size is what the memories ask for.
    With ids, sources and evidence: the share of the evidence turns the context holds
    (context_keys), else None."""
    report = db.compile_context_bundle(tenant, sid, question, log=False)["report"]
    share = None
    if evidence:
        share = len(evidence & context_keys(report, ids or {}, sources)) / len(evidence)
    return report["tokens"]["memory"], memory_items(report)[0], share


def window_figures(probes: dict[str, list[tuple[int, int, float | None]]]) -> dict:
    """block_at_window's (tokens, items, evidence share) per probe as the benches
    report them (evidence: the mean share where measured, else absent)."""
    out = {}
    for p, xs in probes.items():
        out[p] = {"tokens": round(statistics.fmean([t for t, _, _ in xs] or [0]), 1),
                  "items": round(statistics.fmean([n for _, n, _ in xs] or [0]), 2),
                  "max_tokens": max((t for t, _, _ in xs), default=0)}
        shares = [e for _, _, e in xs if e is not None]
        if shares:
            out[p]["evidence"] = round(statistics.fmean(shares), 4)
    return out


def ranked_keys(db, tenant: str, sid, question: str, ids: dict[int, str]) -> list[str | None]:
    """The turns of one compile with a large budget in the order packing values them
    (the report's rank), RANK_DEPTH items at most: the ranking behind recall@k."""
    bundle = db.compile_context_bundle(tenant, sid, question, budget=1_000_000,
                                       caps={"items": RANK_DEPTH}, log=False)
    ranked = sorted((i for i in bundle["report"]["items"] if i["section"] == "memory"),
                    key=lambda i: i["rank"])
    return [ids.get(int(i["source"][4:])) for i in ranked if i["source"].startswith("msg:")]


# ------------------------------------------------------------------ baselines


def tenant_turns(conn: psycopg.Connection, tenant: str) -> list[tuple[int, int]]:
    """(message_id, token_count) of every turn, in recording order."""
    return conn.execute(
        "SELECT message_id, token_count FROM mnemo.messages WHERE tenant_id = %s"
        " ORDER BY created_at, turn_index", (tenant,)).fetchall()


def baseline_rankings(conn: psycopg.Connection, tenant: str, question: str,
                      turns: list[tuple[int, int]], names: Iterable[str] = BASELINES) -> dict[str, list[int]]:
    """message_ids by each baseline named: the last turns first (last_n), pure vector
    (cosine on the same embeddings), pure full-text (fts: ts_rank over an OR of the
    question's lexemes), Okapi BM25 over the tenant's turns (bm25_ranking)."""
    out = {}
    for name in names:
        if name == "last_n":
            out[name] = [r[0] for r in reversed(turns)]
        elif name == "vector":
            out[name] = [r[0] for r in conn.execute(
                "SELECT message_id FROM mnemo.messages WHERE tenant_id = %s AND embedding IS NOT NULL"
                " ORDER BY embedding <=> mnemo.embed(%s) LIMIT %s", (tenant, question, BASELINE_DEPTH))]
        elif name == "fts":
            out[name] = [r[0] for r in conn.execute(
                "SELECT message_id FROM mnemo.messages, "
                " (SELECT replace(plainto_tsquery('english', %s)::text, '&', '|') AS q) AS x"
                " WHERE tenant_id = %s AND x.q <> '' AND search_tsv @@ x.q::tsquery"
                " ORDER BY ts_rank(search_tsv, x.q::tsquery) DESC, message_id LIMIT %s",
                (question, tenant, BASELINE_DEPTH))]
        elif name == "bm25":
            out[name] = bm25_ranking(conn, tenant, question)
        else:
            raise ValueError(f"unknown baseline {name!r}")
    return out


def bm25_ranking(conn: psycopg.Connection, tenant: str, question: str) -> list[int]:
    """message_ids by Okapi BM25 (compile's okapi: k1 1.2, b 0.75) of the question's
    lexemes, each counted once, over the tenant's own turns: idf and average length
    from those turns, term frequencies and lengths in the lexemes of the turns'
    full-text vectors (search_tsv, english). Turns without a query lexeme are left out."""
    rows = conn.execute(
        "SELECT m.message_id, (SELECT sum(coalesce(array_length(d.positions, 1), 1))"
        "   FROM unnest(m.search_tsv) AS d) AS length, t.lexeme, coalesce(array_length(t.positions, 1), 1)"
        " FROM mnemo.messages AS m LEFT JOIN LATERAL unnest(m.search_tsv) AS t"
        "   ON t.lexeme = ANY(tsvector_to_array(to_tsvector('english', %s)))"
        " WHERE m.tenant_id = %s", (question, tenant)).fetchall()
    length = {mid: float(n or 0) for mid, n, _, _ in rows}
    tf = defaultdict(dict)
    for mid, _, lexeme, count in rows:
        if lexeme is not None:
            tf[mid][lexeme] = count
    if not tf:
        return []
    df = defaultdict(int)
    for terms in tf.values():
        for lexeme in terms:
            df[lexeme] += 1
    n, avgdl = len(length), statistics.fmean(length.values()) or 1.0
    idf = {lx: math.log(1 + (n - d + 0.5) / (d + 0.5)) for lx, d in df.items()}
    score = {mid: sum(okapi(idf[lx], c, length[mid], avgdl) for lx, c in terms.items())
             for mid, terms in tf.items()}
    return sorted(score, key=lambda mid: (-score[mid], mid))[:BASELINE_DEPTH]


def pack(ranking: list[int], cost: dict[int, int], budget: int, stop_at_first_miss: bool) -> tuple[list[int], int]:
    """The turns of a ranking that fit a budget of their own token counts, in order:
    a turn that does not fit is skipped (or ends the packing: the last turns, which
    must stay contiguous). Returns (message_ids, tokens used)."""
    used, got = 0, []
    for m in ranking:
        if used + cost[m] > budget:
            if stop_at_first_miss:
                break
            continue
        used += cost[m]
        got.append(m)
    return got, used


def score_baselines(scores: Scores, conn: psycopg.Connection, tenant: str, question: str, category,
                    evidence: set[str], ids: dict[int, str], turns: list[tuple[int, int]],
                    ks: Iterable[int], budgets: Iterable[int] = BUDGETS,
                    names: Iterable[str] = BASELINES) -> None:
    """Each baseline's recall@k and evidence at each budget, charged only the turns' own
    token counts (cheaper than compile_context's labelled memory lines)."""
    cost = dict(turns)
    for name, ranking in baseline_rankings(conn, tenant, question, turns, names).items():
        for k in ks:
            scores.add(name, f"@{k}", category, evidence, {ids[m] for m in ranking[:k]})
        for b in budgets:
            got, used = pack(ranking, cost, b, name == "last_n")
            scores.add(name, str(b), category, evidence, {ids[m] for m in got}, used)


# ------------------------------------------------------------------ scores and report helpers


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


class Scores:
    """Evidence recall per (method, setting), per category."""

    def __init__(self):
        self.recall = defaultdict(list)   # (method, setting, category) -> [fraction]
        self.full = defaultdict(list)     # ... -> [all evidence in: 0/1]
        self.any = defaultdict(list)      # ... -> [some evidence in: 0/1]
        self.tokens = defaultdict(list)   # (method, setting) -> [tokens used]
        self.found = defaultdict(list)    # (method, setting) -> [evidence turns found], with tokens
        self.answer = defaultdict(list)   # (method, setting) -> [gold answer's words in the context: 0/1]

    def add_answer(self, method: str, setting: str, bundle: dict, answer) -> None:
        """Counts whether a short gold answer is in the compiled context
        (answer_in_context); answers answer_words leaves out are not counted."""
        words = answer_words(answer)
        if words is not None:
            self.answer[(method, setting)].append(1.0 if answer_in_context(bundle, words) else 0.0)

    def answer_share(self, method: str, setting: str) -> float:
        xs = self.answer[(method, setting)]
        return round(statistics.fmean(xs), 4) if xs else 0.0

    def add(self, method: str, setting: str, cat, evidence: set[str], got: set[str],
            tokens: int | None = None) -> None:
        hit = len(evidence & got) / len(evidence)
        self.recall[(method, setting, cat)].append(hit)
        self.full[(method, setting, cat)].append(1.0 if hit == 1.0 else 0.0)
        self.any[(method, setting, cat)].append(1.0 if hit > 0 else 0.0)
        if tokens is not None:
            self.tokens[(method, setting)].append(tokens)
            self.found[(method, setting)].append(len(evidence & got))

    def tokens_per_evidence(self, method: str, setting: str) -> float | None:
        """The tokens sent per evidence turn found: what a context pays for what it
        holds (None when it found none)."""
        found = sum(self.found[(method, setting)])
        return round(sum(self.tokens[(method, setting)]) / found, 1) if found else None

    def mean(self, method: str, setting: str, cats=(1, 2, 3, 4), table=None) -> float:
        xs = [x for c in cats for x in (self.recall if table is None else table)[(method, setting, c)]]
        return round(statistics.fmean(xs), 4) if xs else 0.0

    def mean_tokens(self, method: str, setting: str) -> float:
        xs = self.tokens[(method, setting)]
        return round(statistics.fmean(xs), 1) if xs else 0.0
