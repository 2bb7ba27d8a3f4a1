"""compile_context's database side: prepared statements, run inside PL/Python.

`Compiler.compile` is the body of mnemo.compile_context_bundle. Its statements are
prepared once per backend: tenant check, session, history (within reach of the
budget), then retrieval (the memories with the term statistics and the previous
context, the messages from their sealed segments and the live tail, and, after
fusion, the picked rows; see CANDIDATE_POOL). The query is embedded on a thread from
the start, while those reads run; its cosines are computed in numpy from the vectors
read. context.fuse_candidates picks the candidates, context.compile_bundle decides,
and the context is logged. The decisions live in context.py; nothing here decides.
"""

from __future__ import annotations

import functools
import gc
import json
import re
import sys
import time
from concurrent.futures import Executor, ThreadPoolExecutor

import numpy as np
import orjson

from . import context, embedding, redact, summarize
from .timestamps import utc_datetime

ENTER = "SELECT mnemo_internal.enter_tenant($1)"

SESSION = """
SELECT s.channel, s.agent_id, s.status, s.context_window, s.response_reserve, s.summary_text,
    sp.content AS system_prompt, sp.token_count AS system_prompt_tokens, t.config -> 'scoring' AS scoring,
    extract(epoch FROM coalesce($3, now()))::float8 AS now_epoch,
    mnemo_internal.redaction_enabled($1) AS redact
FROM mnemo.sessions AS s
JOIN mnemo.tenants AS t ON t.tenant_id = s.tenant_id
LEFT JOIN mnemo.system_prompts AS sp
    ON sp.tenant_id = s.tenant_id AND sp.prompt_hash = s.system_prompt_hash
WHERE s.tenant_id = $1 AND s.session_id = $2
"""

# The active (not compacted, not pruned) history within reach of the budget B ($5):
# newest first, a row is fetched while the rows newer than it can cost no more than
# B between them even at their cheapest. A row's floor: its stored token count if it
# is short (it has no lower level), its smallest stored level's text if it has levels,
# else 0 (a long row whose levels are not stored yet, a row with tool calls that may
# be sent without some of them, or a row withheld on this channel, $6). The first row
# past B is still fetched, so packing sees that older history exists (the session
# summary then covers it). The newest RECENT_TURNS rows always come (the task type
# is classified from them), and never more than $4 rows.
# One row of aligned arrays, oldest first, rather than a row per message: PL/Python
# builds a dict per row, and that cost ~0.35 ms more for a typical history (150-200
# messages). No message: one row of NULLs.
HISTORY = """
SELECT array_agg(h.message_id) AS message_id, array_agg(h.turn_index) AS turn_index,
    array_agg(h.role) AS role, array_agg(h.content) AS content,
    array_agg(h.content_parts::text) AS content_parts, array_agg(h.name) AS name,
    array_agg(h.tool_calls::text) AS tool_calls, array_agg(h.tool_call_id) AS tool_call_id,
    array_agg(h.token_count) AS token_count, array_agg(h.sensitivity) AS sensitivity,
    array_agg(h.artifact_id) AS artifact_id,
    array_agg(extract(epoch FROM h.created_at)::float8) AS created_epoch,
    array_agg(h.levels::text) AS levels
FROM (
    -- in turn order (the aggregates keep their input's)
    SELECT h.* FROM (
        SELECT m.*, row_number() OVER newest AS n, sum(CASE
                WHEN m.tool_calls IS NOT NULL OR m.sensitivity <> ALL($6) OR m.token_count IS NULL THEN 0
                WHEN m.levels IS NOT NULL THEN least(m.token_count,
                    (m.levels #>> '{detail,tokens}')::integer, (m.levels #>> '{compact,tokens}')::integer,
                    (m.levels #>> '{stub,tokens}')::integer)
                WHEN m.token_count < $7 THEN m.token_count
                ELSE 0
            END) OVER (newest ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS newer_floor
        FROM mnemo.messages AS m
        WHERE m.tenant_id = $1 AND m.session_id = $2 AND NOT m.is_compacted AND NOT m.is_pruned
            AND ($3::timestamptz IS NULL OR m.created_at <= $3)
        WINDOW newest AS (ORDER BY m.turn_index DESC)
        ORDER BY m.turn_index DESC
        LIMIT $4
    ) AS h
    WHERE h.n <= $8 OR coalesce(h.newer_floor, 0) <= $5
    ORDER BY h.turn_index
) AS h
"""
HISTORY_TYPES = ["text", "uuid", "timestamptz", "bigint", "integer", "text[]", "integer", "integer"]
MIN_MESSAGE_TOKENS = 3  # the per-message framing alone
MAX_HISTORY_ROWS = 4000
# Fewer candidate lines than this are counted on one thread: handing half to the
# embedding thread costs a thread wake-up, more than counting a few short lines.
PARALLEL_COUNT_MIN_LINES = 16

LAST_USER = """
SELECT m.content FROM mnemo.messages AS m
WHERE m.tenant_id = $1 AND m.session_id = $2 AND m.role = 'user' AND m.content IS NOT NULL
    AND ($3::timestamptz IS NULL OR m.created_at <= $3) AND m.sensitivity = ANY($4)
ORDER BY m.turn_index DESC LIMIT 1
"""

# Retrieval is exact per tenant (an exact scan measured faster than HNSW with a
# tenant filter at these sizes: see bench/context.py), read while the query is still
# being embedded, in three statements:
# 1. CANDIDATE_POOL: the tenant's visible memories with their lexical signals and
#    vectors (context.CandidatePool): the query's lexemes with their idf and the
#    average document length (from the tenant's mnemo.lexicon), each memory's
#    document length and the query lexemes it contains (BM25 is computed from these
#    by context.bm25), the tag match (a memory's tag, key entity or linked entity
#    named in the query, $8), trigram word similarity ($3, a short query only: a
#    misspelt name or identifier still reaches a memory). Also the memory items of
#    the session's previous context.
# 2. MESSAGE_SEGMENTS: the tenant's messages as sealed segments (mnemo.message_segments,
#    migration 0007) plus the live tail after them (mnemo_internal.message_segment),
#    each with which of its sessions this reader may see and the postings of the
#    query's lexemes; context.message_pool filters and orders them.
# 3. CANDIDATE_ROWS, after context.fuse_candidates picked: the picked rows, in full.
#    A message is looked up by its whole primary key: with its partition key
#    (created_at) each lookup prunes to one partition. Epoch seconds as float8
#    round-trip a timestamp's microseconds exactly through to_timestamp() until 2106.
#    A message pruned since its segment was sealed is dropped here.
# Vectors travel as bytes (memories as pgvector sends them, messages as int8 codes
# with a scale each): the cosines are computed once the query's embedding is there,
# without another statement.
CANDIDATE_POOL = """
WITH lexemes AS (
    SELECT x.lexeme, (row_number() OVER (ORDER BY x.lexeme))::integer - 1 AS k
    FROM unnest(tsvector_to_array(to_tsvector('english', coalesce($4, '')))) AS x (lexeme)
),
totals AS MATERIALIZED (
    -- the tenant's document count and total length ('' row of the lexicon)
    SELECT greatest(coalesce(max(l.doc_count), 0), 1)::float8 AS n_docs,
        coalesce(max(l.total_length), 0)::float8 AS total_length
    FROM mnemo.lexicon AS l WHERE l.tenant_id = $1 AND l.lexeme = ''
),
terms AS MATERIALIZED (
    SELECT x.k, x.lexeme, quote_literal(x.lexeme)::tsquery AS tq,
        ln(1 + (tot.n_docs - coalesce(l.doc_count, 0) + 0.5) / (coalesce(l.doc_count, 0) + 0.5)) AS idf
    FROM lexemes AS x CROSS JOIN totals AS tot
    LEFT JOIN mnemo.lexicon AS l ON l.tenant_id = $1 AND l.lexeme = x.lexeme
),
mem AS MATERIALIZED (
    SELECT (row_number() OVER (ORDER BY mm.memory_id))::integer - 1 AS pos, mm.memory_id AS id,
        mm.search_tsv, length(mm.search_tsv) AS doc_length,
        EXISTS (SELECT FROM unnest(mm.tags || mm.key_entities) AS x
            WHERE lower(x) = ANY($8) OR lower(split_part(x, ':', 2)) = ANY($8))
        OR mm.memory_id IN (SELECT em.memory_id FROM mnemo.entities AS e
            JOIN mnemo.entity_mentions AS em ON em.tenant_id = e.tenant_id AND em.entity_id = e.entity_id
            WHERE e.tenant_id = $1 AND e.normalized = ANY($8)) AS tag_match,
        CASE WHEN coalesce($3, '') <> '' THEN word_similarity($3, left(mm.content_full, 256)) ELSE 0 END AS trgm,
        mm.is_pinned, coalesce(ma.access_count, 0) AS access_count, mm.scope = 'global' AS is_global,
        coalesce(least(mm.tokens_full, mm.tokens_detail, mm.tokens_compact, mm.tokens_stub), 0) AS floor_tokens,
        mm.embedding
    FROM mnemo.memories AS mm
    LEFT JOIN mnemo.memory_access AS ma ON ma.tenant_id = $1 AND ma.memory_id = mm.memory_id
    WHERE mm.tenant_id = $1 AND mm.sensitivity = ANY($6) AND mm.kind <> ALL($7)
        AND (mm.scope = 'global' OR mm.session_id = $2)
        AND CASE WHEN $5::timestamptz IS NULL
            THEN mm.is_active AND mm.superseded_by IS NULL
                AND (mm.valid_to IS NULL OR mm.valid_to > now())
                AND (mm.expires_at IS NULL OR mm.expires_at > now())
            ELSE mm.created_at <= $5 AND mm.valid_from <= $5 AND (mm.valid_to IS NULL OR mm.valid_to > $5)
        END
)
SELECT a.*, h.*,
    (SELECT array_agg(t.lexeme ORDER BY t.k) FROM terms AS t) AS lexemes,
    (SELECT array_agg(t.idf::float8 ORDER BY t.k) FROM terms AS t) AS idf,
    (SELECT CASE WHEN tot.total_length > 0 THEN tot.total_length / tot.n_docs ELSE 8.0 END
        FROM totals AS tot) AS avgdl,
    -- the newest row picked first, then its items filtered: in one level, the filter ran
    -- on every row the sort read (two or more), each detoasting its items
    (SELECT jsonb_path_query_array(last.items, '$[*] ? (@.section == "memory")')::text
        FROM (SELECT cl.items FROM mnemo.context_log AS cl
            WHERE cl.tenant_id = $1 AND cl.session_id = $2
            ORDER BY cl.created_at DESC, cl.context_id DESC LIMIT 1) AS last) AS previous_items
FROM
    (SELECT array_agg(mem.id) AS mem_ids,
        array_agg(mem.doc_length) AS mem_doc_length,
        array_agg(mem.tag_match) AS mem_tag,
        array_agg(mem.trgm::float8) AS mem_trgm,
        array_agg(mem.is_pinned) AS mem_pinned,
        array_agg(mem.access_count) AS mem_access,
        array_agg(mem.is_global) AS mem_global,
        array_agg(mem.floor_tokens) AS mem_floor,
        array_agg(mem.embedding IS NOT NULL) AS mem_embedded,
        array_agg(coalesce(vector_norm(mem.embedding), 0)) AS mem_norm,
        string_agg(substring(vector_send(mem.embedding) FROM 5), ''::bytea) AS mem_embeddings
    -- in memory id order (the aggregates keep their input's)
    FROM (SELECT * FROM mem ORDER BY mem.pos) AS mem) AS a,
    (SELECT array_agg(mem.pos ORDER BY mem.pos, t.k) AS mem_hit_rows,
        array_agg(t.k ORDER BY mem.pos, t.k) AS mem_hit_terms
    FROM mem JOIN terms AS t ON mem.search_tsv @@ t.tq) AS h
"""
CANDIDATE_POOL_TYPES = ["text", "uuid", "text", "text", "timestamptz", "text[]", "text[]", "text[]"]

# One row per sealed segment, then the tail after the last one ($1 tenant, $2
# session, $3 the query's lexemes, $4 the channels this reader may recall from, $5
# its agent). session_visible: per segment session, whether this reader may see it
# (its own session, or a session of a recallable channel: a private or agent session
# only of the same agent). hit_terms / hit_rows: the query lexemes' postings.
MESSAGE_SEGMENTS = """
WITH seg AS (
    SELECT s.n_messages, s.message_ids, s.session_ids, s.session_pos, s.turn_index, s.created_epoch,
        s.token_count, s.stub_tokens, s.doc_length, s.sensitivities, s.sensitivity_pos, s.speakers,
        s.speaker_pos, s.embedded, s.embedding_norm, s.embeddings, s.embedding_scale, s.lexemes,
        s.posting_offsets, s.postings
    FROM mnemo.message_segments AS s WHERE s.tenant_id = $1
    UNION ALL
    SELECT t.n_messages, t.message_ids, t.session_ids, t.session_pos, t.turn_index, t.created_epoch,
        t.token_count, t.stub_tokens, t.doc_length, t.sensitivities, t.sensitivity_pos, t.speakers,
        t.speaker_pos, t.embedded, t.embedding_norm, q.codes, q.scales, t.lexemes, t.posting_offsets,
        t.postings
    FROM (
        -- the tail is mostly empty: an index probe is cheaper than the function that
        -- finds out (OFFSET 0: probe first, then call)
        SELECT sealed.after_id FROM (SELECT coalesce(max(x.last_message_id), 0) AS after_id
            FROM mnemo.message_segments AS x WHERE x.tenant_id = $1) AS sealed
        WHERE EXISTS (SELECT FROM mnemo.messages AS m WHERE m.tenant_id = $1 AND m.message_id > sealed.after_id)
        OFFSET 0
    ) AS tail CROSS JOIN LATERAL mnemo_internal.message_segment($1, tail.after_id, NULL, NULL, $3) AS t
        CROSS JOIN LATERAL mnemo_internal.quantize_embeddings(t.embeddings) AS q
)
SELECT seg.n_messages, seg.message_ids, seg.session_ids, seg.session_pos, seg.turn_index,
    seg.created_epoch, seg.token_count, seg.stub_tokens, seg.doc_length, seg.sensitivities,
    seg.sensitivity_pos, seg.speakers, seg.speaker_pos, seg.embedded, seg.embedding_norm, seg.embeddings,
    seg.embedding_scale, ARRAY(SELECT coalesce(ss.session_id = $2 OR ss.channel = ANY($4)
            AND (ss.channel NOT IN ('private', 'agent') OR ss.agent_id = $5), false)
        FROM unnest(seg.session_ids) WITH ORDINALITY AS u (session_id, k)
        LEFT JOIN mnemo.sessions AS ss ON ss.tenant_id = $1 AND ss.session_id = u.session_id
        ORDER BY u.k) AS session_visible,
    h.hit_terms, h.hit_rows
FROM seg CROSS JOIN LATERAL mnemo_internal.segment_hits(seg.lexemes, seg.posting_offsets, seg.postings, $3) AS h
WHERE seg.n_messages > 0
"""
MESSAGE_SEGMENTS_TYPES = ["text", "uuid", "text[]", "text[]", "text"]

# One row of aligned arrays (as HISTORY, and for the same reason); no row found: NULLs.
CANDIDATE_ROWS = """
SELECT array_agg(r.source) AS source, array_agg(r.kind) AS kind, array_agg(r.text) AS text,
    array_agg(r.content_detail) AS content_detail, array_agg(r.content_compact) AS content_compact,
    array_agg(r.content_stub) AS content_stub, array_agg(r.losses) AS losses,
    array_agg(r.sensitivity) AS sensitivity, array_agg(r.accessed_epoch) AS accessed_epoch,
    array_agg(r.created_epoch) AS created_epoch, array_agg(r.confidence) AS confidence,
    array_agg(r.provenance_type) AS provenance_type, array_agg(r.role) AS role,
    array_agg(r.name) AS name, array_agg(r.full_tokens) AS full_tokens,
    array_agg(r.detail_tokens) AS detail_tokens, array_agg(r.compact_tokens) AS compact_tokens,
    array_agg(r.stub_tokens) AS stub_tokens
FROM (
    SELECT 'mem:' || mm.memory_id AS source, mm.kind, mm.content_full AS text, mm.content_detail,
        mm.content_compact, mm.content_stub, mm.losses::text AS losses, mm.sensitivity,
        extract(epoch FROM ma.last_accessed_at)::float8 AS accessed_epoch,
        extract(epoch FROM mm.created_at)::float8 AS created_epoch,
        mm.confidence::float8 AS confidence, mm.provenance_type,
        NULL::text AS role, NULL::text AS name,
        -- each text's tokens as a line's text part (migration 0012; NULL: count it)
        mm.line_tokens[1] AS full_tokens, mm.line_tokens[2] AS detail_tokens,
        mm.line_tokens[3] AS compact_tokens, mm.line_tokens[4] AS stub_tokens
    FROM mnemo.memories AS mm
    LEFT JOIN mnemo.memory_access AS ma ON ma.tenant_id = $1 AND ma.memory_id = mm.memory_id
    WHERE mm.tenant_id = $1 AND mm.memory_id = ANY($2)
    UNION ALL
    SELECT 'msg:' || m.message_id, 'message', m.content, NULL, NULL, NULL, NULL, m.sensitivity,
        NULL, k.created_epoch, 1.0,
        -- A message is a verbatim record: one authority for every speaker (a role says
        -- who spoke, not how reliable it is), tool outputs aside.
        CASE m.role WHEN 'tool' THEN 'tool_output' ELSE 'fact' END, m.role, m.name,
        m.line_tokens, NULL, NULL, NULL
    FROM unnest($3::bigint[], $4::float8[]) AS k (message_id, created_epoch)
    JOIN mnemo.messages AS m ON m.tenant_id = $1 AND m.message_id = k.message_id
        AND m.created_at = to_timestamp(k.created_epoch) AND NOT m.is_pruned
) AS r
"""
CANDIDATE_ROWS_TYPES = ["text", "bigint[]", "bigint[]", "float8[]"]

# The context_log row (its memory items are folded into the access statistics by
# the 'access' sweep, off the hot path).
LOG = """
INSERT INTO mnemo.context_log (tenant_id, session_id, query, task_type, budget, tokens_used,
    sections, items, omissions, provenance, latency_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb, $10::jsonb, $11)
RETURNING context_id
"""

_WORD_RE = re.compile(r"[\w.-]+")
# Trigram word similarity finds a misspelt name or identifier, a query of a few
# words. It needs most of the query's trigrams in one stretch of a memory, which a
# question almost never has: with up to 6 words it was computed for 9 % of the
# LoCoMo questions and reached 0.6 in 4 of 835 (question, tenant) pairs of the bench
# corpus, for ~1.9 ms a compile (~20 us a memory, ~100 memories a tenant).
TRIGRAM_MAX_QUERY_WORDS = 3


def query_words(query: str | None) -> list[str]:
    """The query's lower-cased words, matched against tags, entities and speakers."""
    return sorted({w.lower().strip(".-") for w in _WORD_RE.findall(query or "")} - {""})


def trigram_query(query: str | None, words: list[str]) -> str | None:
    """The query for trigram word similarity: a short one only."""
    return query if len(words) <= TRIGRAM_MAX_QUERY_WORDS else None


def history_rows(available: int) -> int:
    """History rows worth fetching for a budget B."""
    return min(max(available // MIN_MESSAGE_TOKENS, 16), MAX_HISTORY_ROWS)


def history_args(tenant_id: str, session_id: str, as_of, available: int, channel: str) -> list:
    """The HISTORY statement's arguments for a budget B on a channel."""
    return [tenant_id, session_id, as_of, history_rows(available), available,
            list(context.CHANNEL_SENSITIVITY[channel]), summarize.MIN_TOKENS_FOR_SUMMARY,
            context.RECENT_TURNS]


def pool_args(tenant_id: str, session_id: str, query: str | None, words: list[str], as_of,
              channel: str) -> list:
    """The CANDIDATE_POOL statement's arguments (words: query_words(query))."""
    return [tenant_id, session_id, trigram_query(query, words), query, as_of,
            list(context.CHANNEL_SENSITIVITY[channel]), list(context.CHANNEL_EXCLUDED_KINDS.get(channel, ())),
            words]


def segments_args(tenant_id: str, session_id: str, lexemes: list[str] | None, channel: str,
                  agent_id: str | None) -> list:
    """The MESSAGE_SEGMENTS statement's arguments."""
    return [tenant_id, session_id, lexemes or [], list(context.CHANNEL_SOURCES[channel]), agent_id]


def _ints(values) -> np.ndarray:
    return np.asarray(values or [], dtype=np.int64)


def _sent(data: bytes | None, dtype: str) -> np.ndarray:
    """Values PostgreSQL sent concatenated (int8send and the like: big-endian)."""
    return np.frombuffer(data or b"", dtype=">" + dtype).astype(dtype)


def count_lines_split(lines: list[str], executor: Executor) -> list[int]:
    """context.count_lines on two threads: the executor's (the embedding thread, idle
    once the query is embedded) counts the second half while this one counts the
    first; the tokenizer releases the GIL. Counting the candidates' lines was ~0.9 ms
    of a compile, all of it after the embedding (interleaved A/B, 600 compiles: p50
    -0.45 ms)."""
    if len(lines) < PARALLEL_COUNT_MIN_LINES:
        return context.count_lines(lines)
    # split where half of the text is on either side
    half, total, acc = 0, sum(map(len, lines)), 0
    while acc * 2 < total:
        acc += len(lines[half])
        half += 1
    second = executor.submit(context.count_lines, lines[half:])
    return context.count_lines(lines[:half]) + second.result()


def message_part(r: dict) -> context.MessagePart:
    """A MESSAGE_SEGMENTS row as a context.MessagePart."""
    embedded = _sent(r["embedded"], "u1").astype(bool)
    # codes x scale is the vector: the cosine on the codes takes its norm / scale
    with np.errstate(divide="ignore", invalid="ignore"):
        norms = _sent(r["embedding_norm"], "f8")[embedded] / _sent(r["embedding_scale"], "f4")
    return context.MessagePart(
        message_ids=_sent(r["message_ids"], "i8"), session_ids=[str(x) for x in r["session_ids"]],
        session_pos=_sent(r["session_pos"], "i4"), session_visible=np.asarray(r["session_visible"], dtype=bool),
        turn_index=_sent(r["turn_index"], "i4"), created_epoch=_sent(r["created_epoch"], "f8"),
        token_count=_sent(r["token_count"], "i4"), stub_tokens=_sent(r["stub_tokens"], "i4"),
        doc_length=_sent(r["doc_length"], "i4"),
        sensitivities=list(r["sensitivities"]), sensitivity_pos=_sent(r["sensitivity_pos"], "i4"),
        speakers=list(r["speakers"]), speaker_pos=_sent(r["speaker_pos"], "i4"),
        embedded=embedded, norms=norms, vectors=embedding.from_int8_codes(r["embeddings"], len(norms)),
        hit_rows=_ints(r["hit_rows"]), hit_terms=_ints(r["hit_terms"]))


def candidate_pool(r: dict, segments: list[dict], channel: str, as_of_epoch: float | None,
                   exclude: list[int], words: list[str]) -> context.CandidatePool:
    """The CANDIDATE_POOL row (memories) and the MESSAGE_SEGMENTS rows as a
    context.CandidatePool (words: the query's, query_words)."""
    idf, avgdl = r["idf"] or [], r["avgdl"]
    mem_ids = _ints(r["mem_ids"])
    n_mem = len(mem_ids)
    mem_embedded = np.asarray(r["mem_embedded"] or [], dtype=bool)
    n_mem_vectors = int(mem_embedded.sum())
    msg = context.message_pool([message_part(x) for x in segments], idf, avgdl,
                               context.CHANNEL_SENSITIVITY[channel], as_of_epoch, exclude, words)
    n_msg = len(msg["message_ids"])

    def arr(name: str, dtype, messages=None) -> np.ndarray:
        """Memories then messages; a signal messages lack is zero for them."""
        return np.concatenate([np.asarray(r["mem_" + name] or [], dtype=dtype),
                               messages if messages is not None else np.zeros(n_msg, dtype)])

    return context.CandidatePool(
        memory_ids=mem_ids, message_ids=msg["message_ids"], message_created=msg["message_created"],
        same_session=msg["same_session"], floor_tokens=arr("floor", np.int64, msg["floor_tokens"]),
        bm25=np.concatenate([context.bm25(n_mem, r["mem_hit_rows"], r["mem_hit_terms"], idf,
                                          r["mem_doc_length"] or [], avgdl), msg["bm25"]]),
        tag_match=arr("tag", bool, msg["tag_match"]), trigram=arr("trgm", np.float64),
        pinned=arr("pinned", bool), access_count=arr("access", np.int64), is_global=arr("global", bool),
        embedded=np.concatenate([np.flatnonzero(mem_embedded), n_mem + msg["embedded"]]),
        vectors=[embedding.from_pgvector_bytes(r["mem_embeddings"], n_mem_vectors)] + msg["vectors"],
        vector_rows=np.concatenate([np.arange(n_mem_vectors), n_mem_vectors + msg["vector_rows"]]),
        norms=np.concatenate([np.asarray(r["mem_norm"] or [], dtype=np.float64)[mem_embedded], msg["norms"]]))


def rows_args(tenant_id: str, fused: list[dict]) -> list:
    """The CANDIDATE_ROWS statement's arguments for the fused candidates."""
    messages = [c for c in fused if c["created_epoch"] is not None]
    return [tenant_id, [c["id"] for c in fused if c["created_epoch"] is None],
            [c["id"] for c in messages], [c["created_epoch"] for c in messages]]


def dumps(value) -> str:
    """JSON text (UTF-8) of a report part or the bundle; a timestamp as its str()
    form. orjson (~8x faster) unless the value holds what it cannot write: an integer
    beyond 64 bits, which a stored message's content parts or tool calls may carry
    (jsonb keeps any number) and which goes back out unchanged."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_PASSTHROUGH_DATETIME).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, default=str)


def loads_stored(text: str | None):
    """A message's own JSON as the caller stored it (content parts, tool calls): the
    standard library keeps every number as written (orjson turns an integer beyond
    64 bits into a float and rejects one beyond a double's range), so the message goes
    back out verbatim and costs what its stored token count says."""
    return json.loads(text) if text else None


def history_messages(r: dict) -> list[dict]:
    """The HISTORY row (aligned arrays) as messages, oldest first, as
    context.compile_bundle takes them."""
    if r["message_id"] is None:
        return []
    return [{
        "message_id": mid, "turn_index": turn, "role": role, "content": content,
        "content_parts": loads_stored(parts), "name": name, "tool_calls": loads_stored(calls),
        "tool_call_id": call_id, "token_count": tokens_, "sensitivity": sensitivity,
        "artifact_id": artifact, "created_at": utc_datetime(epoch),
        "levels": orjson.loads(levels) if levels else None,
    } for mid, turn, role, content, parts, name, calls, call_id, tokens_, sensitivity, artifact, epoch, levels
        in zip(r["message_id"], r["turn_index"], r["role"], r["content"], r["content_parts"], r["name"],
               r["tool_calls"], r["tool_call_id"], r["token_count"], r["sensitivity"], r["artifact_id"],
               r["created_epoch"], r["levels"], strict=True)]


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


class Compiler:
    def __init__(self, plpy):
        self.plpy = plpy
        p = plpy.prepare
        self.enter = p(ENTER, ["text"])
        self.session = p(SESSION, ["text", "uuid", "timestamptz"])
        self.history = p(HISTORY, HISTORY_TYPES)
        self.last_user = p(LAST_USER, ["text", "uuid", "timestamptz", "text[]"])
        self.candidate_pool = p(CANDIDATE_POOL, CANDIDATE_POOL_TYPES)
        self.message_segments = p(MESSAGE_SEGMENTS, MESSAGE_SEGMENTS_TYPES)
        self.candidate_rows = p(CANDIDATE_ROWS, CANDIDATE_ROWS_TYPES)
        self.log = p(LOG, ["text", "uuid", "text", "text", "integer", "integer", "text", "text",
                           "text", "text", "real"])
        # as_of: the API's one timestamp check (MN001 outside years 2-9998 UTC)
        self.check_ts = p("SELECT mnemo_internal.checked_timestamp($1, 'option as_of') AS ts", ["text"])
        self.raise_error = p("SELECT mnemo_internal.raise_error($1, $2, $3)",
                             ["text", "text", "text"])
        # The query is embedded on a thread while the statements before the candidate
        # query run (onnxruntime and tokenizers release the GIL): the embedding is the
        # largest single cost of a compile, and this way it mostly hides behind them.
        plpy.execute("SELECT mnemo.embed('')")  # loads the model in this backend
        self.embedder = embedding.loaded()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemo-embed")
        # The embedding thread needs the GIL to start the encoder and to return its
        # output; with Python's default 5 ms switch interval it waited behind the
        # compile's own Python work for up to that long (embedding_wait p50 6.2 -> 4.2 ms).
        sys.setswitchinterval(0.0002)
        # Everything loaded so far (model, tokenizer, modules) lives as long as the
        # backend: out of the garbage collector's sight, a full collection no longer
        # walks it (measured: 10 ms -> 1.8 ms per gen-2 collection, one every ~40
        # compiles, straight into the latency tail).
        gc.freeze()

    def _embed_async(self, query: str | None) -> embedding.PendingEmbedding | None:
        """Starts embedding the query on the pool's thread (embedding.Embedder.start:
        tokenized here, the thread runs only the encoder, without the GIL) and returns
        once the encoder runs."""
        return self.embedder.start(query, self.pool) if query else None

    @staticmethod
    def _clean_query(query: str | None, redacting: bool) -> str | None:
        query = query.strip() if query and query.strip() else None
        if query and redacting:
            # the query is logged (context_log, report): no secret may reach a table
            query = redact.redact(query)[0]
        return query

    def error(self, message: str, code: str = "MN001", hint: str | None = None):
        self.plpy.execute(self.raise_error, [code, message, hint])

    def compile(self, tenant_id: str, session_id: str, query: str | None, options_json: str | None,
                messages_only: bool = False) -> str:
        """The bundle as JSON text (the messages alone if messages_only)."""
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
            as_of = plpy.execute(self.check_ts, [as_of])[0]["ts"]
        rows = plpy.execute(self.session, [tenant_id, session_id, as_of])
        if not rows:
            self.error(f"unknown session {session_id}", "MN003")
        s = rows[0]
        try:
            opts = context.parse_options(raw, s["channel"])
        except context.OptionError as e:
            self.error(str(e))
        now = utc_datetime(s["now_epoch"])
        session = {
            "context_window": s["context_window"], "response_reserve": s["response_reserve"],
            "system_prompt": s["system_prompt"], "system_prompt_tokens": s["system_prompt_tokens"],
            "summary_text": s["summary_text"],
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
        history = history_messages(plpy.execute(self.history, history_args(
            tenant_id, session_id, as_of, available, opts["channel"]))[0])
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
        room = context.memory_room(prepared, available, opts)
        watch.lap("history")
        words = query_words(query)
        lexical = plpy.execute(self.candidate_pool, pool_args(
            tenant_id, session_id, query, words, as_of, opts["channel"]))[0]
        segments = plpy.execute(self.message_segments, segments_args(
            tenant_id, session_id, lexical["lexemes"], opts["channel"], s["agent_id"]))
        pool = candidate_pool(lexical, segments, opts["channel"], s["now_epoch"] if as_of else None,
                              exclude, words)
        # (the previous context's memory items only: CANDIDATE_POOL selects them)
        previous = [(i["source"], i.get("fidelity")) for i in orjson.loads(lexical["previous_items"] or "[]")]
        watch.lap("lexical")
        query_vector = embedding_of_query.result()[0] if embedding_of_query else None
        watch.lap("embedding_wait")
        cosine = pool.cosine(query_vector) if query_vector is not None else np.full(pool.size, np.nan)
        watch.lap("vector")
        candidates = self._candidates(tenant_id, context.fuse_candidates(pool, cosine, weights, room))
        watch.lap("candidates")
        bundle = context.compile_bundle(session, history, candidates, opts, now, weights,
                                        previous, query, prepared,
                                        functools.partial(count_lines_split, executor=self.pool))
        watch.lap("pack")
        report = bundle["report"]
        latency = watch.elapsed_ms()
        context_id = None
        if opts["log"]:
            context_id = plpy.execute(self.log, [
                tenant_id, session_id, query, task, report["budget"]["available"],
                report["tokens"]["total"], dumps(report["tokens"]),
                dumps(report["items"]), dumps(report["omissions"]),
                dumps(report["provenance"]), latency,
            ])[0]["context_id"]
        watch.lap("log")
        report["timings_ms"] = watch.laps
        report["context_id"] = context_id
        report["session_id"] = session_id
        report["latency_ms"] = round(latency, 3)
        return dumps(bundle["messages"] if messages_only else bundle)

    def _candidates(self, tenant_id: str, fused: list[dict]) -> list[dict]:
        """The fused candidates with their rows, as context.compile_bundle takes them."""
        if not fused:
            return []
        r = self.plpy.execute(self.candidate_rows, rows_args(tenant_id, fused))[0]
        at = {source: i for i, source in enumerate(r["source"] or ())}
        full_tokens, detail_tokens, compact_tokens, stub_tokens = (
            r["full_tokens"], r["detail_tokens"], r["compact_tokens"], r["stub_tokens"])
        out = []
        for c in fused:
            i = at.get(c["source"])
            if i is None:
                continue  # deleted since the pool was read
            levels = None
            if r["content_detail"][i]:
                losses = orjson.loads(r["losses"][i] or "{}")
                levels = {name: {"text": r[f"content_{name}"][i], "losses": losses.get(name, {})}
                          for name in ("detail", "compact", "stub") if r[f"content_{name}"][i]}
            out.append({
                "source": c["source"], "kind": r["kind"][i], "text": r["text"][i] or "",
                "levels": levels, "relevance": c["relevance"],
                "sensitivity": r["sensitivity"][i], "is_pinned": c["is_pinned"],
                "access_count": c["access_count"],
                "last_accessed_at": utc_datetime(r["accessed_epoch"][i]),
                "created_at": utc_datetime(r["created_epoch"][i]),
                "confidence": r["confidence"][i], "provenance_type": r["provenance_type"][i],
                "role": r["role"][i], "name": r["name"][i],
                "retrievers": c["retrievers"],
                "text_tokens": (full_tokens[i], detail_tokens[i], compact_tokens[i], stub_tokens[i]),
            })
        return out
