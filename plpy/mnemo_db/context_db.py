"""compile_context's database side: prepared statements, run inside PL/Python.

`Compiler.compile` is the body of mnemo.compile_context_bundle. It runs five
statements (prepared once per backend): tenant check, session, history, term
statistics plus previous context, and one candidate query that scans the tenant's
memories and messages exactly (vector cosine, BM25, tags and entities) and fuses the
signals. The query is embedded on a thread meanwhile. Then context.compile_bundle decides, and the
context is logged. The decisions live in context.py; nothing here decides.
"""

from __future__ import annotations

import gc
import json
import math
import re
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from . import context, embedding, redact

ENTER = "SELECT mnemo_internal.enter_tenant($1)"

SESSION = """
SELECT s.channel, s.agent_id, s.status, s.context_window, s.response_reserve, s.summary_text,
    sp.content AS system_prompt, t.config -> 'scoring' AS scoring,
    extract(epoch FROM coalesce($3, now()))::float8 AS now_epoch,
    mnemo_internal.redaction_enabled($1) AS redact
FROM mnemo.sessions AS s
JOIN mnemo.tenants AS t ON t.tenant_id = s.tenant_id
LEFT JOIN mnemo.system_prompts AS sp
    ON sp.tenant_id = s.tenant_id AND sp.prompt_hash = s.system_prompt_hash
WHERE s.tenant_id = $1 AND s.session_id = $2
"""

# The active (not compacted, not pruned) history, newest rows first up to a row
# bound: any kept message costs at least a few tokens even as a stub, so more than
# budget / MIN_MESSAGE_TOKENS rows can never fit.
HISTORY = """
SELECT h.message_id, h.turn_index, h.role, h.content, h.content_parts::text AS content_parts,
    h.name, h.tool_calls::text AS tool_calls, h.tool_call_id, h.token_count, h.sensitivity,
    h.artifact_id, extract(epoch FROM h.created_at)::float8 AS created_epoch,
    h.levels::text AS levels
FROM (
    SELECT * FROM mnemo.messages AS m
    WHERE m.tenant_id = $1 AND m.session_id = $2 AND NOT m.is_compacted AND NOT m.is_pruned
        AND ($3::timestamptz IS NULL OR m.created_at <= $3)
    ORDER BY m.turn_index DESC
    LIMIT $4
) AS h
ORDER BY h.turn_index
"""
MIN_MESSAGE_TOKENS = 3  # the per-message framing alone
MAX_HISTORY_ROWS = 4000

LAST_USER = """
SELECT m.content FROM mnemo.messages AS m
WHERE m.tenant_id = $1 AND m.session_id = $2 AND m.role = 'user' AND m.content IS NOT NULL
    AND ($3::timestamptz IS NULL OR m.created_at <= $3) AND m.sensitivity = ANY($4)
ORDER BY m.turn_index DESC LIMIT 1
"""

# Query lexemes with their document frequency, the tenant's totals, and the memory
# items of the session's previous context (in their order).
TERMS = """
WITH t AS (
    SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', $2))) AS lexeme
), totals AS (
    SELECT l.doc_count, l.total_length FROM mnemo.lexicon AS l
    WHERE l.tenant_id = $1 AND l.lexeme = ''
)
SELECT
    coalesce((SELECT array_agg(t.lexeme ORDER BY t.lexeme) FROM t), '{}') AS lexemes,
    coalesce((SELECT array_agg(coalesce(l.doc_count, 0) ORDER BY t.lexeme)
        FROM t LEFT JOIN mnemo.lexicon AS l ON l.tenant_id = $1 AND l.lexeme = t.lexeme), '{}') AS dfs,
    coalesce((SELECT totals.doc_count FROM totals), 0) AS n_docs,
    coalesce((SELECT totals.total_length FROM totals), 0) AS total_length,
    (SELECT cl.items::text FROM mnemo.context_log AS cl
        WHERE cl.tenant_id = $1 AND cl.session_id = $3
        ORDER BY cl.created_at DESC, cl.context_id DESC LIMIT 1) AS previous_items
"""

# One exact pass over the tenant's visible memories and messages (an exact scan per
# tenant measured faster than HNSW with a tenant filter at these sizes: see
# bench/context.py), fused relevance in [0, 1]:
#   (1 - a) * cosine + a * BM25 / max BM25  (+ tag bonus)  (+ g * best neighbour turn)
# The tag bonus: a memory's tag, key entity or linked entity, or a message's speaker,
# named in the query. Trigram word similarity ($3, a short query only) lets a
# misspelt name or identifier still reach a memory.
# Messages in the session's verbatim history window are excluded ($11).
CANDIDATES = """
WITH q AS MATERIALIZED (
    SELECT $18::vector AS e,
        CASE WHEN cardinality($4::text[]) > 0 THEN array_to_string(
            ARRAY(SELECT quote_literal(x) FROM unnest($4::text[]) AS x), ' | ')::tsquery END AS tsq
),
terms AS MATERIALIZED (
    SELECT quote_literal(u.lexeme)::tsquery AS tq, u.idf FROM unnest($4::text[], $5::float8[]) AS u (lexeme, idf)
),
mem AS (
    SELECT 'mem:' || mm.memory_id AS source, NULL::uuid AS session_id, NULL::integer AS turn_index,
        1 - (mm.embedding <=> q.e) AS cosine,
        CASE WHEN mm.search_tsv @@ q.tsq THEN (SELECT sum(t.idf) FROM terms AS t WHERE mm.search_tsv @@ t.tq)
            * 2.2 / (1 + 1.2 * (0.25 + 0.75 * length(mm.search_tsv) / $6)) END AS bm25,
        EXISTS (SELECT FROM unnest(mm.tags || mm.key_entities) AS x
            WHERE lower(x) = ANY($16) OR lower(split_part(x, ':', 2)) = ANY($16))
        OR mm.memory_id IN (SELECT em.memory_id FROM mnemo.entities AS e
            JOIN mnemo.entity_mentions AS em ON em.tenant_id = e.tenant_id AND em.entity_id = e.entity_id
            WHERE e.tenant_id = $1 AND e.normalized = ANY($16)) AS tag_match,
        CASE WHEN coalesce($3, '') <> '' THEN word_similarity($3, left(mm.content_full, 256)) ELSE 0 END AS trgm,
        mm.is_pinned, mm.access_count, mm.scope,
        mm.kind, mm.content_full AS text, mm.content_detail, mm.content_compact, mm.content_stub,
        mm.losses::text AS losses, mm.sensitivity, mm.last_accessed_at, mm.created_at,
        mm.confidence::float8 AS confidence, mm.provenance_type,
        NULL::text AS role, NULL::text AS name, NULL::bigint AS artifact_id,
        NULL::bigint AS message_id, mm.memory_id
    FROM mnemo.memories AS mm CROSS JOIN q
    WHERE mm.tenant_id = $1 AND mm.sensitivity = ANY($8) AND mm.kind <> ALL($14)
        AND (mm.scope = 'global' OR mm.session_id = $2)
        AND CASE WHEN $7::timestamptz IS NULL
            THEN mm.is_active AND mm.superseded_by IS NULL
                AND (mm.valid_to IS NULL OR mm.valid_to > now())
                AND (mm.expires_at IS NULL OR mm.expires_at > now())
            ELSE mm.created_at <= $7 AND mm.valid_from <= $7 AND (mm.valid_to IS NULL OR mm.valid_to > $7)
        END
),
msg AS (
    SELECT 'msg:' || m.message_id AS source, m.session_id, m.turn_index,
        1 - (m.embedding <=> q.e) AS cosine,
        CASE WHEN m.search_tsv @@ q.tsq THEN (SELECT sum(t.idf) FROM terms AS t WHERE m.search_tsv @@ t.tq)
            * 2.2 / (1 + 1.2 * (0.25 + 0.75 * length(m.search_tsv) / $6)) END AS bm25,
        -- who said it: a question about a person favours that person's turns
        coalesce(lower(m.name) = ANY($16), false) AS tag_match,
        0::real AS trgm, false AS is_pinned, 0 AS access_count, 'local' AS scope,
        'message' AS kind, m.content AS text, NULL AS content_detail, NULL AS content_compact,
        NULL AS content_stub, NULL AS losses, m.sensitivity, NULL::timestamptz AS last_accessed_at,
        m.created_at, 1.0::float8 AS confidence,
        -- A message is a verbatim record: one authority for every speaker (a role says
        -- who spoke, not how reliable it is), tool outputs aside.
        CASE m.role WHEN 'tool' THEN 'tool_output' ELSE 'fact' END AS provenance_type,
        m.role, m.name, m.artifact_id, m.message_id, NULL::bigint AS memory_id
    FROM mnemo.messages AS m CROSS JOIN q
    JOIN mnemo.sessions AS s ON s.tenant_id = m.tenant_id AND s.session_id = m.session_id
    WHERE m.tenant_id = $1 AND NOT m.is_pruned AND m.sensitivity = ANY($8)
        AND m.content IS NOT NULL AND m.role IN ('user', 'assistant', 'tool')
        AND ($7::timestamptz IS NULL OR m.created_at <= $7)
        AND m.message_id <> ALL($11)
        AND (m.session_id = $2 OR s.channel = ANY($9)
            AND (s.channel NOT IN ('private', 'agent') OR s.agent_id = $10))
),
-- Every column the caller needs travels with the candidate (joining the picked rows
-- back to their partitioned tables cost more than the whole scan), but the ranking
-- below sorts narrow rows only; the wide ones are joined back from the pool at the end.
pool AS MATERIALIZED (SELECT * FROM mem UNION ALL SELECT * FROM msg),
fused AS (
    SELECT p.source, p.session_id, p.turn_index, p.cosine, p.scope, p.access_count,
        p.is_pinned, p.trgm,
        least(1.0, (1 - $12) * greatest(coalesce(p.cosine, 0), 0)
            + $12 * coalesce(p.bm25 / nullif(max(p.bm25) OVER (), 0), 0)
            + CASE WHEN p.tag_match THEN $13 ELSE 0 END) AS rel0
    FROM pool AS p
),
ranked AS MATERIALIZED (
    -- neighbours: the turns before and after a message in its session (memories have none)
    SELECT f.source, f.scope, f.access_count, f.is_pinned, f.trgm,
        f.rel0 + CASE WHEN f.session_id IS NULL THEN 0 ELSE $15 * greatest(
            coalesce(lag(f.rel0) OVER w, 0), coalesce(lead(f.rel0) OVER w, 0)) END AS relevance,
        rank() OVER (ORDER BY f.cosine DESC NULLS LAST) AS vector_rank
    FROM fused AS f
    WINDOW w AS (PARTITION BY f.session_id ORDER BY f.turn_index)
),
top AS (
    SELECT r.source FROM ranked AS r ORDER BY r.relevance DESC, r.source LIMIT $17
),
frequent AS (
    SELECT r.source FROM ranked AS r WHERE r.scope = 'global' AND r.access_count > 0
    ORDER BY r.access_count DESC, r.source LIMIT 20
),
picked AS (
    SELECT r.source, r.relevance, r.vector_rank FROM ranked AS r
    WHERE r.source IN (SELECT top.source FROM top) OR r.is_pinned OR r.trgm >= 0.6
        OR r.source IN (SELECT frequent.source FROM frequent)
)
SELECT p.source, k.relevance::float8 AS relevance, p.cosine::float8 AS cosine, p.bm25::float8 AS bm25,
    p.tag_match, p.trgm::float8 AS trgm, k.vector_rank, p.kind, p.text,
    p.content_detail, p.content_compact, p.content_stub, p.losses, p.sensitivity, p.is_pinned,
    p.access_count, extract(epoch FROM p.last_accessed_at)::float8 AS accessed_epoch,
    extract(epoch FROM p.created_at)::float8 AS created_epoch, p.confidence, p.provenance_type,
    p.role, p.name, p.artifact_id, p.message_id, p.memory_id
FROM picked AS k JOIN pool AS p ON p.source = k.source
"""

CANDIDATE_TYPES = [
    "text", "uuid", "text", "text[]", "float8[]", "float8", "timestamptz", "text[]",
    "text[]", "text", "bigint[]", "float8", "float8", "text[]", "float8", "text[]", "integer",
    "vector",
]

LOG = """
INSERT INTO mnemo.context_log (tenant_id, session_id, query, task_type, budget, tokens_used,
    sections, items, omissions, provenance, latency_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb, $10::jsonb, $11)
RETURNING context_id
"""

ACCESS_JOB = """
SELECT mnemo_internal.enqueue_job($1, 'record_access', 'session:' || $2,
    jsonb_build_object('session_id', $2))
"""

_WORD_RE = re.compile(r"[\w.-]+")
# Trigram word similarity finds a misspelt name or identifier; against a whole
# question it is noise (and it costs a string comparison per memory).
TRIGRAM_MAX_QUERY_WORDS = 6
# Candidates fetched: enough to fill the budget with short items (a budget larger
# than the whole history must be able to hold all of it), within sane bounds.
MIN_CANDIDATES, MAX_CANDIDATES, TOKENS_PER_CANDIDATE = 60, 2000, 12


def query_words(query: str | None) -> list[str]:
    """The query's lower-cased words, matched against tags, entities and speakers."""
    return sorted({w.lower().strip(".-") for w in _WORD_RE.findall(query or "")} - {""})


def trigram_query(query: str | None, words: list[str]) -> str | None:
    """The query for trigram word similarity: a short one only."""
    return query if len(words) <= TRIGRAM_MAX_QUERY_WORDS else None


def history_rows(available: int) -> int:
    """History rows worth fetching for a budget B."""
    return min(max(available // MIN_MESSAGE_TOKENS, 16), MAX_HISTORY_ROWS)


def candidate_limit(room: int) -> int:
    """Candidates worth fetching for a memory block of at most `room` tokens."""
    return min(max(room // TOKENS_PER_CANDIDATE, MIN_CANDIDATES), MAX_CANDIDATES)


class Stopwatch:
    """Milliseconds spent in each phase of a compile (the report's timings_ms)."""

    def __init__(self):
        self.started = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = round((now - self.last) * 1000.0, 2)
        self.last = now


def _idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


class Compiler:
    def __init__(self, plpy):
        self.plpy = plpy
        p = plpy.prepare
        self.enter = p(ENTER, ["text"])
        self.session = p(SESSION, ["text", "uuid", "timestamptz"])
        self.history = p(HISTORY, ["text", "uuid", "timestamptz", "bigint"])
        self.last_user = p(LAST_USER, ["text", "uuid", "timestamptz", "text[]"])
        self.terms = p(TERMS, ["text", "text", "uuid"])
        self.candidates = p(CANDIDATES, CANDIDATE_TYPES)
        self.log = p(LOG, ["text", "uuid", "text", "text", "integer", "integer", "text", "text",
                           "text", "text", "real"])
        self.access_job = p(ACCESS_JOB, ["text", "text"])
        # as_of must be finite and within what Python's datetime holds (years 1-9999)
        self.check_ts = p("SELECT t AS ts FROM (SELECT $1::timestamptz AS t) AS x"
                          " WHERE isfinite(t) AND t BETWEEN '0001-01-02' AND '9999-12-30'",
                          ["text"])
        self.raise_error = p("SELECT mnemo_internal.raise_error($1, $2, $3)",
                             ["text", "text", "text"])
        # The query is embedded on a thread while the statements before the candidate
        # query run (onnxruntime and tokenizers release the GIL): the embedding is the
        # largest single cost of a compile, and this way it mostly hides behind them.
        plpy.execute("SELECT mnemo.embed('')")  # loads the model in this backend
        self.embedder = embedding.loaded()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemo-embed")
        # The embedding thread needs the GIL for a moment between its native steps;
        # with Python's default 5 ms switch interval it waited behind the compile's own
        # Python work for up to that long each time (embedding_wait p50 6.2 -> 4.2 ms).
        sys.setswitchinterval(0.0002)
        # Everything loaded so far (model, tokenizer, modules) lives as long as the
        # backend: out of the garbage collector's sight, a full collection no longer
        # walks it (measured: 10 ms -> 1.8 ms per gen-2 collection, one every ~40
        # compiles, straight into the latency tail).
        gc.freeze()

    def _embed_async(self, query: str | None) -> Future | None:
        """Starts embedding the query on the pool's thread. PL/Python keeps the GIL
        during SPI calls, so this waits until the thread has started (it then runs
        into onnxruntime, which releases the GIL) instead of leaving it queued until
        the statements are done."""
        if not query:
            return None
        started = threading.Event()

        def run():
            started.set()
            return self.embedder.embed([query])

        future = self.pool.submit(run)
        started.wait()
        return future

    @staticmethod
    def _clean_query(query: str | None, redacting: bool) -> str | None:
        query = query.strip() if query and query.strip() else None
        if query and redacting:
            # the query is logged (context_log, report): no secret may reach a table
            query = redact.redact(query)[0]
        return query

    def error(self, message: str, code: str = "MN001", hint: str | None = None):
        self.plpy.execute(self.raise_error, [code, message, hint])

    def compile(self, tenant_id: str, session_id: str, query: str | None, options_json: str | None):
        watch = Stopwatch()
        plpy = self.plpy
        if session_id is None:
            self.error("session_id is required")
        # The embedding is the largest single cost of a compile: it starts before
        # anything else and runs while the statements below do.
        query = query.strip() if query and query.strip() else None
        embedding_of_query = self._embed_async(query)
        plpy.execute(self.enter, [tenant_id])
        try:
            raw = json.loads(options_json) if options_json else {}
        except ValueError:
            raw = None
        if not isinstance(raw, dict):
            self.error("options must be a JSON object", hint='e.g. {"budget": 2000}')
        as_of = raw.get("as_of")
        if as_of is not None:
            if not isinstance(as_of, str):
                self.error("option as_of must be a timestamp string")
            try:
                rows = plpy.execute(self.check_ts, [as_of])
            except plpy.SPIError:
                rows = []
            if not rows:
                self.error(f"option as_of is not a finite timestamp between years 1 and 9999: "
                           f"{raw['as_of']!r}")
            as_of = rows[0]["ts"]
        rows = plpy.execute(self.session, [tenant_id, session_id, as_of])
        if not rows:
            self.error(f"unknown session {session_id}", "MN003")
        s = rows[0]
        try:
            opts = context.parse_options(raw, s["channel"])
        except context.OptionError as e:
            self.error(str(e))
        now = context.utc_datetime(s["now_epoch"])
        session = {
            "context_window": s["context_window"], "response_reserve": s["response_reserve"],
            "system_prompt": s["system_prompt"], "summary_text": s["summary_text"],
        }
        weights = context.weights_for(json.loads(s["scoring"]) if s["scoring"] else None)

        # Budget first: it bounds how much history and how many candidates are worth
        # fetching.
        available = context.budget_for(session, opts)[3]
        cleaned = self._clean_query(query, s["redact"])
        if cleaned != query:
            # redaction changed the query: the redacted text is what is searched for
            query, embedding_of_query = cleaned, self._embed_async(cleaned)
        watch.lap("session")
        history = [self._history_row(r) for r in plpy.execute(
            self.history, [tenant_id, session_id, as_of, history_rows(available)])]
        if query is None:
            # the default query: the last user message the channel may see
            last = plpy.execute(self.last_user, [tenant_id, session_id, as_of,
                                                 list(context.CHANNEL_SENSITIVITY[opts["channel"]])])
            query = self._clean_query(last[0]["content"] if last else None, s["redact"])
            embedding_of_query = self._embed_async(query)

        task = opts["task_type"] or context.classify_task(query, history, True)
        opts["task_type"] = task
        # Messages that will surely be in the verbatim history are not candidates, and
        # the pool holds what can fill the room the history leaves.
        exclude = context.verbatim_message_ids(
            history, context.history_share(available, task, opts["cap_history"]))
        prepared = context.PreparedHistory(history, context.CHANNEL_SENSITIVITY[opts["channel"]])
        limit = candidate_limit(context.memory_room(prepared, available, opts))
        watch.lap("history")
        t = plpy.execute(self.terms, [tenant_id, query or "", session_id])[0]
        n_docs = max(t["n_docs"], 1)
        lexemes = list(t["lexemes"] or [])
        idfs = [_idf(n_docs, df) for df in (t["dfs"] or [])]
        avgdl = (t["total_length"] / n_docs) if t["total_length"] else 8.0
        previous = [(i["source"], i.get("fidelity")) for i in json.loads(t["previous_items"] or "[]")
                    if i.get("section") == "memory"]
        watch.lap("terms")
        vector = (embedding.to_pgvector(embedding_of_query.result()[0])
                  if embedding_of_query else None)
        watch.lap("embedding_wait")
        channel = opts["channel"]
        words = query_words(query)
        rows = plpy.execute(self.candidates, [
            tenant_id, session_id, trigram_query(query, words), lexemes, idfs, avgdl, as_of,
            list(context.CHANNEL_SENSITIVITY[channel]), list(context.CHANNEL_SOURCES[channel]),
            s["agent_id"], exclude, weights["lexical"], weights["tag_bonus"],
            list(context.CHANNEL_EXCLUDED_KINDS.get(channel, ())), weights["neighbour"], words,
            limit, vector,
        ])
        watch.lap("candidates_sql")
        candidates = [self._candidate(r, limit) for r in rows]
        watch.lap("candidates_py")
        bundle = context.compile_bundle(session, history, candidates, opts, now, weights,
                                        previous, query, prepared)
        watch.lap("pack")
        report = bundle["report"]
        latency = watch.elapsed_ms()
        context_id = None
        if opts["log"]:
            context_id = plpy.execute(self.log, [
                tenant_id, session_id, query, task, report["budget"]["available"],
                report["tokens"]["total"], json.dumps(report["tokens"]),
                json.dumps(report["items"]), json.dumps(report["omissions"]),
                json.dumps(report["provenance"], default=str), latency,
            ])[0]["context_id"]
            if any(i["source"].startswith("mem:") for i in report["items"]):
                plpy.execute(self.access_job, [tenant_id, session_id])
        watch.lap("log")
        report["timings_ms"] = watch.laps
        report["context_id"] = context_id
        report["session_id"] = session_id
        report["latency_ms"] = round(latency, 3)
        return json.dumps(bundle, ensure_ascii=False, default=str)

    @staticmethod
    def _history_row(r: dict) -> dict:
        return {
            "message_id": r["message_id"], "turn_index": r["turn_index"], "role": r["role"],
            "content": r["content"],
            "content_parts": json.loads(r["content_parts"]) if r["content_parts"] else None,
            "name": r["name"],
            "tool_calls": json.loads(r["tool_calls"]) if r["tool_calls"] else None,
            "tool_call_id": r["tool_call_id"], "token_count": r["token_count"],
            "sensitivity": r["sensitivity"], "artifact_id": r["artifact_id"],
            "created_at": context.utc_datetime(r["created_epoch"]),
            "levels": json.loads(r["levels"]) if r["levels"] else None,
        }

    @staticmethod
    def _candidate(r: dict, limit: int) -> dict:
        retrievers = []
        if r["vector_rank"] is not None and r["cosine"] is not None and r["vector_rank"] <= limit:
            retrievers.append("vector")
        if r["bm25"]:
            retrievers.append("fulltext")
        if r["tag_match"]:
            retrievers.append("entity_tag")
        if (r["trgm"] or 0) >= 0.6:
            retrievers.append("trigram")
        if r["access_count"]:
            retrievers.append("frequent")
        levels = None
        if r["memory_id"] is not None and r["content_detail"]:
            losses = json.loads(r["losses"] or "{}")
            levels = {name: {"text": r[f"content_{name}"], "losses": losses.get(name, {})}
                      for name in ("detail", "compact", "stub") if r[f"content_{name}"]}
        return {
            "source": r["source"], "kind": r["kind"], "text": r["text"] or "",
            "levels": levels, "relevance": r["relevance"] or 0.0,
            "sensitivity": r["sensitivity"], "is_pinned": r["is_pinned"],
            "access_count": r["access_count"], "last_accessed_at": context.utc_datetime(r["accessed_epoch"]),
            "created_at": context.utc_datetime(r["created_epoch"]), "confidence": r["confidence"],
            "provenance_type": r["provenance_type"], "role": r["role"], "name": r["name"],
            "retrievers": retrievers,
        }
