"""compile_context's statements: their text, their parameter types (STATEMENTS, which
the Compiler prepares once per backend) and their arguments. Nothing here decides:
the phases (phases.py) say what to read, rows.py reads what came back."""

from __future__ import annotations

import re

from ..lifecycle import summarize
from ..vocabulary import UPDATED
from .policy import CHANNEL_EXCLUDED_KINDS, CHANNEL_SENSITIVITY, CHANNEL_SOURCES, RECENT_TURNS
from .retrieval import BM25_B, BM25_K1, FREQUENT_GLOBAL, trigram_query
from .updates import EARLIER_VALUE

ENTER = "SELECT mnemo_internal.enter_tenant($1)"

# The session and its time, "now" for freshness and relative dates: the as_of option
# ($3) when given; else, for a session started in the past (start_session's
# p_started_at: an imported conversation), its own time, the newer of its start and
# its newest message; else the real clock.
SESSION = """
SELECT s.channel, s.agent_id, s.status, s.context_window, s.response_reserve, s.summary_text,
    sp.content AS system_prompt, sp.token_count AS system_prompt_tokens, t.config -> 'scoring' AS scoring,
    t.config ->> 'recall_scope' AS recall_scope, (t.config -> 'memory_cap')::text AS memory_cap,
    extract(epoch FROM coalesce($3, CASE WHEN s.started_at IS NULL THEN now() ELSE greatest(s.started_at, (
        SELECT m.created_at FROM mnemo.messages AS m WHERE m.tenant_id = $1 AND m.session_id = $2
        ORDER BY m.turn_index DESC LIMIT 1)) END))::float8 AS now_epoch,
    mnemo_internal.redaction_enabled($1) AS redact, rt.messages_up_to AS recall_up_to,
    rt.memories_synced_at AS recall_synced_at
FROM mnemo.sessions AS s
JOIN mnemo.tenants AS t ON t.tenant_id = s.tenant_id
LEFT JOIN mnemo_internal.recall_tenants AS rt ON rt.tenant_id = s.tenant_id
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
# The floor only bounds what is fetched: packing costs each fetched message exactly
# (history.PreparedHistory). A recalled message's floor as a memory-block line is
# another quantity, with another threshold (retrieval.message_pool).
# One row of aligned arrays, oldest first, rather than a row per message: PL/Python
# builds a dict per row (docs/performance.md). No message: one row of NULLs.
HISTORY = """
SELECT array_agg(h.message_id) FILTER (WHERE h.kept) AS message_id,
    array_agg(h.turn_index) FILTER (WHERE h.kept) AS turn_index,
    array_agg(h.role) FILTER (WHERE h.kept) AS role, array_agg(h.content) FILTER (WHERE h.kept) AS content,
    array_agg(h.content_parts::text) FILTER (WHERE h.kept) AS content_parts,
    array_agg(h.name) FILTER (WHERE h.kept) AS name,
    array_agg(h.tool_calls::text) FILTER (WHERE h.kept) AS tool_calls,
    array_agg(h.tool_call_id) FILTER (WHERE h.kept) AS tool_call_id,
    array_agg(h.token_count) FILTER (WHERE h.kept) AS token_count,
    array_agg(h.sensitivity) FILTER (WHERE h.kept) AS sensitivity,
    array_agg(h.artifact_id) FILTER (WHERE h.kept) AS artifact_id,
    array_agg(extract(epoch FROM h.created_at)::float8) FILTER (WHERE h.kept) AS created_epoch,
    array_agg(h.levels::text) FILTER (WHERE h.kept) AS levels,
    -- what the rows read cost at their cheapest between them (read_history: whether
    -- rows older than the $4 read may still be within reach)
    count(*)::integer AS rows_read, coalesce(sum(h.floor), 0)::bigint AS floor_read
FROM (
    -- in turn order (the aggregates keep their input's)
    SELECT h.*, h.n <= $8 OR coalesce(h.newer_floor, 0) <= $5 AS kept FROM (
        SELECT m.*, row_number() OVER newest AS n, sum(f.floor) OVER (newest ROWS BETWEEN UNBOUNDED PRECEDING
                AND 1 PRECEDING) AS newer_floor, f.floor
        FROM mnemo.messages AS m
        CROSS JOIN LATERAL (SELECT CASE
                WHEN m.tool_calls IS NOT NULL OR m.sensitivity <> ALL($6) OR m.token_count IS NULL THEN 0
                WHEN m.levels IS NOT NULL THEN least(m.token_count,
                    (m.levels #>> '{detail,tokens}')::integer, (m.levels #>> '{compact,tokens}')::integer,
                    (m.levels #>> '{stub,tokens}')::integer)
                WHEN m.token_count < $7 THEN m.token_count
                ELSE 0
            END AS floor) AS f
        WHERE m.tenant_id = $1 AND m.session_id = $2 AND NOT m.is_compacted AND NOT m.is_pruned
            AND ($3::timestamptz IS NULL OR m.created_at <= $3)
        WINDOW newest AS (ORDER BY m.turn_index DESC)
        ORDER BY m.turn_index DESC
        LIMIT $4
    ) AS h
    ORDER BY h.turn_index
) AS h
"""
HISTORY_TYPES = ["text", "uuid", "timestamptz", "bigint", "integer", "text[]", "integer", "integer"]
MIN_MESSAGE_TOKENS = 3  # the per-message framing alone
MAX_HISTORY_ROWS = 4000

# awaits_embedding: its embed job will embed exactly its content (no author's name
# before it: mnemo_internal.embed_target_text), and has not yet.
LAST_USER = """
SELECT m.content, m.message_id, m.embedding IS NULL AND m.name IS NULL AS awaits_embedding
FROM mnemo.messages AS m
WHERE m.tenant_id = $1 AND m.session_id = $2 AND m.role = 'user' AND m.content IS NOT NULL
    AND ($3::timestamptz IS NULL OR m.created_at <= $3) AND m.sensitivity = ANY($4)
ORDER BY m.turn_index DESC LIMIT 1
"""

# Retrieval is exact per tenant (an exact scan measured faster than HNSW with a
# tenant filter at these sizes: see bench/context.py), read while the query is still
# being embedded, in three statements:
# 1. CANDIDATE_POOL: the tenant's visible memories with their lexical signals and
#    vectors (retrieval.CandidatePool): the query's lexemes with their idf and the
#    average document length (from the tenant's mnemo.lexicon), each memory's
#    document length and the query lexemes it contains (BM25 is computed from these
#    by retrieval.bm25), the tag match (a memory's tag, key entity or linked entity
#    named in the query, $8), trigram word similarity ($3, a short query only: a
#    misspelt name or identifier still reaches a memory), each memory's valid_from
#    (when what it says was said: a date range the query names). The lexemes of the
#    time words ($9, a question that asks when) are looked up with the query's
#    (query_lexemes: the query's own), and each query word's lexemes (word_lexemes:
#    a speaker's name is matched as the speaker, retrieval.message_pool). Also the
#    memory items of the session's previous context.
# 2. MESSAGE_SEGMENTS: the tenant's messages as sealed segments (mnemo.message_segments,
#    migration 0007) plus the live tail after them (mnemo_internal.message_segment),
#    each with which of its sessions this reader may see and the postings of the
#    query's lexemes; retrieval.message_pool filters and orders them.
# 3. CANDIDATE_ROWS, after retrieval.fuse_candidates picked: the picked rows, in full.
#    A message is looked up by its whole primary key: with its partition key
#    (created_at) each lookup prunes to one partition. Epoch seconds as float8
#    round-trip a timestamp's microseconds exactly through to_timestamp() until 2106.
#    A message pruned since its segment was sealed is dropped here.
# Vectors travel as bytes (memories as pgvector sends them, messages as int8 codes
# with a scale each): the cosines are computed once the query's embedding is there,
# without another statement.

def query_terms(query: str, time_words: str = "NULL") -> str:
    """CTEs of the query's lexemes (`query`: the parameter holding its text; with
    those of `time_words`, statements.pool_args) with
    their BM25 idf (terms) and the tenant's ($1) document count and total length
    (totals), from its mnemo.lexicon."""
    return f"""
lexemes AS (
    SELECT x.lexeme, (row_number() OVER (ORDER BY x.lexeme))::integer - 1 AS k
    FROM unnest(tsvector_to_array(to_tsvector('english', coalesce({query}, ''))
        || to_tsvector('english', coalesce({time_words}, '')))) AS x (lexeme)
),
totals AS MATERIALIZED (
    -- the tenant's document count and total length ('' row of the lexicon)
    SELECT greatest(coalesce(max(l.doc_count), 0), 1)::float8 AS n_docs,
        coalesce(max(l.total_length), 0)::float8 AS total_length
    FROM mnemo.lexicon AS l WHERE l.tenant_id = $1 AND l.lexeme = ''
),
terms AS MATERIALIZED (
    SELECT x.k, x.lexeme, quote_literal(x.lexeme)::tsquery AS tq, coalesce(l.doc_count, 0) AS df,
        ln(1 + (tot.n_docs - coalesce(l.doc_count, 0) + 0.5) / (coalesce(l.doc_count, 0) + 0.5)) AS idf
    FROM lexemes AS x CROSS JOIN totals AS tot
    LEFT JOIN mnemo.lexicon AS l ON l.tenant_id = $1 AND l.lexeme = x.lexeme
)"""


# The tenant's average document length (BM25's avgdl), from query_terms' totals
# (as tot): what retrieval.bm25 is given and what RECALL_HITS scores with.
AVGDL = "CASE WHEN tot.total_length > 0 THEN tot.total_length / tot.n_docs ELSE 8.0 END"

# The lexicon's figures for the query: its lexemes, their idf, the average length.
TERMS_OUT = f"""
    (SELECT array_agg(t.lexeme ORDER BY t.k) FROM terms AS t) AS lexemes,
    (SELECT array_agg(t.idf::float8 ORDER BY t.k) FROM terms AS t) AS idf,
    (SELECT {AVGDL} FROM totals AS tot) AS avgdl"""

# The entities the query's words name ($1 the tenant, $8 the words), by name
# (migration 0027: by an index of their own, not every entity of the tenant).
NAMED_ENTITIES = "SELECT e.entity_id FROM mnemo.entities AS e WHERE e.tenant_id = $1 AND e.normalized = ANY($8)"

# {memories}: no more (all the tenant's visible memories), or a condition on mm that
# picks some (CANDIDATE_POOL_RECALLED).
_CANDIDATE_POOL = """
WITH {terms},
mem AS MATERIALIZED (
    SELECT (row_number() OVER (ORDER BY mm.memory_id))::integer - 1 AS pos, mm.memory_id AS id,
        mm.search_tsv, length(mm.search_tsv) AS doc_length,
        EXISTS (SELECT FROM unnest(mm.tags || mm.key_entities) AS x
            WHERE lower(x) = ANY($8) OR lower(split_part(x, ':', 2)) = ANY($8))
        -- (memory by memory, by the mentions' primary key: the mentions of a name a
        -- large tenant often mentions are thousands)
        OR EXISTS (SELECT FROM mnemo.entity_mentions AS em WHERE em.tenant_id = $1
            AND em.memory_id = mm.memory_id AND em.entity_id = ANY(ARRAY({named_entities}))) AS tag_match,
        CASE WHEN coalesce($3, '') <> '' THEN word_similarity($3, left(mm.content_full, 256)) ELSE 0 END AS trgm,
        mm.is_pinned, {access_count} AS access_count, mm.scope = 'global' AS is_global,
        coalesce(least(mm.tokens_full, mm.tokens_detail, mm.tokens_compact, mm.tokens_stub), 0) AS floor_tokens,
        mm.valid_from, mm.embedding
    FROM mnemo.memories AS mm{access_join}
    WHERE mm.tenant_id = $1 AND mm.sensitivity = ANY($6) AND mm.kind <> ALL($7)
        AND (mm.scope = 'global' OR mm.session_id = $2)
        AND CASE WHEN $5::timestamptz IS NULL
            THEN mm.is_active AND mm.superseded_by IS NULL
                AND (mm.valid_to IS NULL OR mm.valid_to > now())
                AND (mm.expires_at IS NULL OR mm.expires_at > now())
            ELSE mm.created_at <= $5 AND mm.valid_from <= $5 AND (mm.valid_to IS NULL OR mm.valid_to > $5)
        END {memories}
)
SELECT a.*, h.*, {terms_out},
    tsvector_to_array(to_tsvector('english', coalesce($4, ''))) AS query_lexemes,
    -- each query word's lexemes, space-separated ('' for a stop word)
    (SELECT array_agg(array_to_string(tsvector_to_array(to_tsvector('english', w.word)), ' ')
        ORDER BY w.i) FROM unnest($8) WITH ORDINALITY AS w (word, i)) AS word_lexemes,
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
        array_agg(extract(epoch FROM mem.valid_from)::float8) AS mem_valid_from,
        array_agg(mem.embedding IS NOT NULL) AS mem_embedded,
        array_agg(coalesce(vector_norm(mem.embedding), 0)) AS mem_norm,
        string_agg(substring(vector_send(mem.embedding) FROM 5), ''::bytea) AS mem_embeddings
    -- in memory id order (the aggregates keep their input's)
    FROM (SELECT * FROM mem ORDER BY mem.pos) AS mem) AS a,
    (SELECT array_agg(mem.pos ORDER BY mem.pos, t.k) AS mem_hit_rows,
        array_agg(t.k ORDER BY mem.pos, t.k) AS mem_hit_terms
    FROM mem JOIN terms AS t ON mem.search_tsv @@ t.tq) AS h
"""
# Each memory's access count: the whole pool reads every memory of the tenant and
# joins their access rows; the recalled pool reads a few hundred of a large tenant's
# memories and looks each one up by the primary key: as a join, a generic plan hashed
# every access row of the tenant (7,790 rows read for 292 memories at 100k messages).
ACCESS_JOINED = {"access_count": "coalesce(ma.access_count, 0)", "access_join": """
    LEFT JOIN mnemo.memory_access AS ma ON ma.tenant_id = $1 AND ma.memory_id = mm.memory_id"""}
ACCESS_LOOKED_UP = {"access_join": "", "access_count": """coalesce((SELECT ma.access_count
            FROM mnemo.memory_access AS ma WHERE ma.tenant_id = $1 AND ma.memory_id = mm.memory_id), 0)"""}
CANDIDATE_POOL = _CANDIDATE_POOL.format(terms=query_terms("$4", "$9"), terms_out=TERMS_OUT, memories="",
                                        named_entities=NAMED_ENTITIES, **ACCESS_JOINED)
CANDIDATE_POOL_TYPES = ["text", "uuid", "text", "text", "timestamptz", "text[]", "text[]", "text[]", "text"]

# One row per sealed segment, then the tail after the last one ($1 tenant, $2
# session, $3 the query's lexemes, $4 the channels this reader may recall from, $5
# its agent, $6 the recall scope, policy.RECALL_SCOPES). session_visible: per segment
# session, whether this reader may see it: its own session, or a session of a
# recallable channel, where another agent's session is seen only if it is a private
# one and the scope is the tenant (an `agent` session is its agent's alone).
# session_scoped_out: whether it is hidden for belonging to another agent alone (the
# report counts what that hid). hit_terms / hit_rows: the query lexemes' postings.
def segment_of(call: str) -> str:
    """A segment's columns from a mnemo_internal.message_segment `call` (as t), its
    vectors quantized as sealed segments store them. Named as the CTE's column list
    names them: Citus plans the CTE apart and reads its rows by the names of its first
    branch's columns, not the list's (codes, scales: "seg.embeddings does not exist")."""
    return f"""
    SELECT t.n_messages, t.message_ids, t.session_ids, t.session_pos, t.turn_index, t.created_epoch,
        t.token_count, t.stub_tokens, t.doc_length, t.sensitivities, t.sensitivity_pos, t.speakers,
        t.speaker_pos, t.roles, t.role_pos, t.embedded, t.embedding_norm, q.codes AS embeddings,
        q.scales AS embedding_scale, t.lexemes, t.posting_offsets, t.postings
    FROM {call} AS t CROSS JOIN LATERAL mnemo_internal.quantize_embeddings(t.embeddings) AS q"""


def tail_after(after_id: str) -> str:
    """The tenant's messages after `after_id` (an expression of a subquery `sealed`)."""
    return segment_of(f"""(
        -- the tail is mostly empty: an index probe is cheaper than the function that
        -- finds out (OFFSET 0: probe first, then call)
        SELECT sealed.after_id FROM ({after_id}) AS sealed
        WHERE EXISTS (SELECT FROM mnemo.messages AS m WHERE m.tenant_id = $1 AND m.message_id > sealed.after_id)
        OFFSET 0
    ) AS tail CROSS JOIN LATERAL mnemo_internal.message_segment($1, tail.after_id, NULL, NULL, $3)""")


# What MESSAGE_SEGMENTS and RECALLED_MESSAGES return for each segment (seg) they read.
SEGMENT_ROWS = """
SELECT seg.n_messages, seg.message_ids, seg.session_ids, seg.session_pos, seg.turn_index,
    seg.created_epoch, seg.token_count, seg.stub_tokens, seg.doc_length, seg.sensitivities,
    seg.sensitivity_pos, seg.speakers, seg.speaker_pos, seg.roles, seg.role_pos, seg.embedded, seg.embedding_norm,
    seg.embeddings, seg.embedding_scale, vis.session_visible, vis.session_scoped_out,
    h.hit_terms, h.hit_rows
FROM seg CROSS JOIN LATERAL mnemo_internal.segment_hits(seg.lexemes, seg.posting_offsets, seg.postings, $3) AS h
CROSS JOIN LATERAL (
    SELECT array_agg(coalesce(v.own OR v.recallable AND NOT v.agents_only, false) ORDER BY u.k)
            AS session_visible,
        array_agg(coalesce(NOT v.own AND v.recallable AND v.agents_only, false) ORDER BY u.k)
            AS session_scoped_out
    FROM unnest(seg.session_ids) WITH ORDINALITY AS u (session_id, k)
    -- each session by its primary key (LIMIT 1: a subquery the planner cannot fold
    -- into a join): as a join, a generic plan hashed every session of the tenant for
    -- each segment, a cost that grew with the tenant's sessions
    LEFT JOIN LATERAL (SELECT ss.session_id, ss.channel, ss.agent_id FROM mnemo.sessions AS ss
        WHERE ss.tenant_id = $1 AND ss.session_id = u.session_id LIMIT 1) AS ss ON true
    CROSS JOIN LATERAL (SELECT ss.session_id = $2 AS own, ss.channel = ANY($4) AS recallable,
        ss.agent_id <> $5 AND (ss.channel = 'agent' OR ss.channel = 'private' AND $6 = 'agent')
            AS agents_only) AS v
) AS vis
WHERE seg.n_messages > 0
"""

MESSAGE_SEGMENTS = f"""
WITH seg (n_messages, message_ids, session_ids, session_pos, turn_index, created_epoch, token_count,
    stub_tokens, doc_length, sensitivities, sensitivity_pos, speakers, speaker_pos, roles, role_pos, embedded,
    embedding_norm, embeddings, embedding_scale, lexemes, posting_offsets, postings) AS (
    SELECT s.n_messages, s.message_ids, s.session_ids, s.session_pos, s.turn_index, s.created_epoch,
        s.token_count, s.stub_tokens, s.doc_length, s.sensitivities, s.sensitivity_pos, s.speakers,
        s.speaker_pos, s.roles, s.role_pos, s.embedded, s.embedding_norm, s.embeddings, s.embedding_scale,
        s.lexemes, s.posting_offsets, s.postings
    FROM mnemo.message_segments AS s WHERE s.tenant_id = $1
    UNION ALL
    {tail_after("SELECT coalesce(max(x.last_message_id), 0) AS after_id "
                "FROM mnemo.message_segments AS x WHERE x.tenant_id = $1")}
)
{SEGMENT_ROWS}"""
MESSAGE_SEGMENTS_TYPES = ["text", "uuid", "text[]", "text[]", "text", "text"]

# A tenant with a recall index (mnemo_internal.recall_index, migration 0017: a large one) is
# read by index, never whole: what a compile reads grows with k, not with its history.
# 1. RECALL_HITS, while the query is embedded: the items that contain a query lexeme
#    (of a frequent one, a bounded number: below), through the tenant's own GIN index
#    (the postings of the query's terms only), and ranks them by BM25 with the
#    lexicon's figures: the k best leave it.
# 2. RECALL_KNN, once the query's embedding is there: the k nearest messages and the
#    k nearest memories, each by the tenant's own HNSW index over that kind
#    (migration 0024: on one graph, memories took almost all of the k nearest).
#    The query vector is a halfvec parameter, not text cast in the statement: under a
#    generic plan the cast stayed an expression that the scan evaluated again and
#    again.
# The indexes are partial (WHERE tenant_id = the tenant, and for HNSW the kind): the
# tenant is written into these two statements' text (TENANT, a quoted literal), each
# prepared per tenant (TENANT_STATEMENTS, with FREQUENT_MEMORIES below).
# 3. CANDIDATE_POOL_RECALLED: CANDIDATE_POOL on the memories found ($10: with the most
#    used, FREQUENT_MEMORIES) and those the index may lack or that are candidates
#    whatever their relevance, each by an index: changed since the last sync ($11),
#    pinned, the newest linked to an entity the query names, close to a short query
#    by trigram.
# 4. RECALLED_MESSAGES: the messages found ($7, with their created_at, $8) and the
#    turns just before and after each (the neighbour bonus), as one segment, then the
#    tail after the index ($9), as MESSAGE_SEGMENTS returns them.
TENANT = "@tenant"

# RECALL_HITS reads every item that holds a rare term of the query (a tenant's
# lexicon says how many hold it: at most RECALL_POSTINGS), then the items that hold
# two of its frequent terms, the pairs of highest idf first, up to RECALL_PAIR_ROWS
# rows. When those are at least k ($3), it reads RECALL_POSTINGS items that hold a
# frequent term, that of highest idf first: they hold one low-idf term and nothing
# else, so the k best lie elsewhere (else it reads them all: a question of frequent
# words alone is ranked among them by length). Each item found is then matched
# against every term, so its BM25 is exact. The order matters where the bounds bite:
# an item's BM25 here is the sum of the idfs of the terms it holds, scaled by its
# length, so the items of the higher-idf pairs and terms are the better ones. The
# bounds keep a question of frequent words from reading what grows with the tenant
# (docs/performance.md).
RECALL_POSTINGS = 1000
RECALL_PAIR_ROWS = 5000


def recall_hits(postings: int = RECALL_POSTINGS, pair_rows: int = RECALL_PAIR_ROWS) -> str:
    """RECALL_HITS with its bounds (a test narrows them to a small tenant's size)."""
    return f"""
WITH {query_terms("$2")},
base AS MATERIALIZED (
    SELECT r.is_memory, r.item_id, r.created_at, r.search_tsv
    FROM terms AS t JOIN mnemo_internal.recall_index AS r ON r.tenant_id = {TENANT} AND r.search_tsv @@ t.tq
    WHERE t.df <= {postings}
    UNION ALL
    (SELECT r.is_memory, r.item_id, r.created_at, r.search_tsv
    FROM (SELECT a.tq && b.tq AS tq FROM terms AS a JOIN terms AS b
            ON a.k < b.k AND a.df > {postings} AND b.df > {postings}
            ORDER BY a.idf + b.idf DESC, a.k, b.k) AS pair
    CROSS JOIN LATERAL (SELECT r.is_memory, r.item_id, r.created_at, r.search_tsv
        FROM mnemo_internal.recall_index AS r WHERE r.tenant_id = {TENANT} AND r.search_tsv @@ pair.tq) AS r
    LIMIT {pair_rows})
),
found AS MATERIALIZED (
    SELECT DISTINCT ON (f.is_memory, f.item_id) f.is_memory, f.item_id, f.created_at, f.search_tsv
    FROM (
        SELECT * FROM base
        UNION ALL
        (SELECT r.is_memory, r.item_id, r.created_at, r.search_tsv
        FROM (SELECT t.tq FROM terms AS t WHERE t.df > {postings} ORDER BY t.idf DESC, t.k) AS t
        CROSS JOIN LATERAL (
            SELECT r.is_memory, r.item_id, r.created_at, r.search_tsv FROM mnemo_internal.recall_index AS r
            WHERE r.tenant_id = {TENANT} AND r.search_tsv @@ t.tq) AS r
        LIMIT CASE WHEN (SELECT count(*) FROM base) >= $3 THEN {postings} END)
    ) AS f
),
-- each item's BM25 as retrieval.bm25 computes it, with the same float operations in
-- the same order (the idfs summed in term order, then scaled by the length), so the
-- k best are ranked here and only they leave the statement: the arrays of every item
-- read and its hits, and their conversion to Python, were a third of its time. Each
-- item is scored on its own row (its terms by a subquery): a join of every item with
-- every term, grouped back by item, sorted ~10,000 rows for a question of nine terms.
average AS (SELECT {AVGDL} AS avgdl FROM totals AS tot),
scored AS (
    SELECT f.is_memory, f.item_id, f.created_at, h.held,
        h.idf_sum * ({BM25_K1}::float8 + 1) / (1 + {BM25_K1}::float8 * (1 - {BM25_B}::float8
            + {BM25_B}::float8 * (length(f.search_tsv) / (SELECT a.avgdl FROM average AS a)))) AS score
    FROM found AS f CROSS JOIN LATERAL (
        SELECT count(*)::integer AS held, sum(t.idf ORDER BY t.k) AS idf_sum
        FROM terms AS t WHERE f.search_tsv @@ t.tq) AS h
    WHERE h.held > 0
)
SELECT (SELECT count(*) FROM found)::integer AS items_read, array_agg(b.is_memory) AS is_memory,
    array_agg(b.item_id) AS item_id, array_agg(extract(epoch FROM b.created_at)::float8) AS created_epoch,
    array_agg(b.score) AS score, array_agg(b.held) AS held
-- the k best, ties to the lower id, then the message (as retrieval.bm25's callers
-- sorted them), in that order (the aggregates keep their input's)
FROM (SELECT * FROM scored AS s ORDER BY s.score DESC, s.item_id, s.is_memory LIMIT $3) AS b
"""


RECALL_HITS = recall_hits()

RECALL_KNN = f"""
SELECT array_agg(r.is_memory) AS is_memory, array_agg(r.item_id) AS item_id,
    array_agg(extract(epoch FROM r.created_at)::float8) AS created_epoch
FROM ((SELECT r.is_memory, r.item_id, r.created_at FROM mnemo_internal.recall_index AS r
        WHERE r.tenant_id = {TENANT} AND NOT r.is_memory ORDER BY r.embedding <=> $1 LIMIT $2)
    UNION ALL
    (SELECT r.is_memory, r.item_id, r.created_at FROM mnemo_internal.recall_index AS r
        WHERE r.tenant_id = {TENANT} AND r.is_memory ORDER BY r.embedding <=> $1 LIMIT $2)) AS r
"""

# The tenant's most used memories, candidates whatever their relevance, by its
# (tenant_id, access_count) index. Prepared per tenant: with the tenant a parameter, a
# generic plan took it for an average tenant, read every access row of the tenant and
# sorted them (growing with what the tenant has used); with the tenant a literal the
# planner knows its rows and reads the first ones off the index.
FREQUENT_MEMORIES = f"""
SELECT array_agg(a.memory_id) AS memory_id
FROM (SELECT a.memory_id FROM mnemo.memory_access AS a WHERE a.tenant_id = {TENANT}
    ORDER BY a.access_count DESC LIMIT {5 * FREQUENT_GLOBAL}) AS a
"""

CANDIDATE_POOL_RECALLED = _CANDIDATE_POOL.format(
    terms=query_terms("$4", "$9"), terms_out=TERMS_OUT, named_entities=NAMED_ENTITIES, **ACCESS_LOOKED_UP,
    memories=f"""
        -- the ids first, as one array: each memory is then found by the primary key
        -- (an IN semi-join read every memory of the tenant in key order to match them:
        -- a generic plan takes any tenant for an average one)
        AND mm.memory_id = ANY (ARRAY(
            SELECT unnest($10::bigint[])
            UNION ALL
            SELECT u.memory_id FROM mnemo.memories AS u WHERE u.tenant_id = $1 AND u.updated_at >= $11
            UNION ALL
            SELECT p.memory_id FROM mnemo.memories AS p WHERE p.tenant_id = $1 AND p.is_pinned AND p.is_active
            UNION ALL
            -- (the newest: a name a large tenant often mentions links thousands; each
            -- entity's newest by its index, then the newest of those)
            (SELECT x.memory_id FROM ({NAMED_ENTITIES}) AS e
                CROSS JOIN LATERAL (SELECT em.memory_id FROM mnemo.entity_mentions AS em
                    WHERE em.tenant_id = $1 AND em.entity_id = e.entity_id
                    ORDER BY em.memory_id DESC LIMIT {5 * FREQUENT_GLOBAL}) AS x
                ORDER BY x.memory_id DESC LIMIT {5 * FREQUENT_GLOBAL})
            UNION ALL
            SELECT g.memory_id FROM mnemo.memories AS g
            WHERE g.tenant_id = $1 AND g.is_active AND $3 IS NOT NULL AND $3 <% g.content_full
        ))""")
CANDIDATE_POOL_RECALLED_TYPES = CANDIDATE_POOL_TYPES + ["bigint[]", "timestamptz"]

# How far in time a found turn's neighbours are looked for first (RECALLED_MESSAGES).
NEAR_TURNS = "1 day"

RECALLED_MESSAGES = f"""
WITH keys AS MATERIALIZED (
    SELECT k.message_id, to_timestamp(k.created_epoch) AS created_at
    FROM unnest($7::bigint[], $8::float8[]) AS k (message_id, created_epoch)
),
turns AS MATERIALIZED (
    SELECT m.session_id, m.turn_index, m.turn_index - 1 AS first_turn, m.turn_index + 1 AS last_turn,
        m.created_at - interval '{NEAR_TURNS}' AS near_from, m.created_at + interval '{NEAR_TURNS}' AS near_to
    FROM keys AS k
    JOIN mnemo.messages AS m ON m.tenant_id = $1 AND m.message_id = k.message_id AND m.created_at = k.created_at
),
-- Each turn with the turns just before and after it, looked for first within a day
-- of it: the partition key bounds the probe to one or two monthly partitions, where
-- a probe of the session's turns alone reads every partition of the tenant, a cost
-- that grew with the months of its history (13 probes a turn for a year). A turn
-- whose day lacks the turn before or after it (a session's first or last turn, a
-- pause of more than a day) is looked for in every partition. (A session's turns are
-- numbered once each; only compaction summaries, system messages that no segment
-- holds, share turn -1.) Under row-level security a condition that calls a function
-- that is not leakproof (to_timestamp, integer or interval arithmetic) is not an
-- index condition: it filtered whole sessions. The keys and bounds are computed
-- first, the conditions only compare columns.
near AS MATERIALIZED (
    SELECT t.session_id, t.turn_index AS found_turn, n.turn_index, n.message_id, n.created_at
    FROM turns AS t
    JOIN mnemo.messages AS n ON n.tenant_id = $1 AND n.session_id = t.session_id
        AND n.turn_index BETWEEN t.first_turn AND t.last_turn
        AND n.created_at BETWEEN t.near_from AND t.near_to
),
found AS (
    SELECT x.message_id, x.created_at FROM near AS x
    UNION
    SELECT n.message_id, n.created_at
    FROM turns AS t
    JOIN mnemo.messages AS n ON n.tenant_id = $1 AND n.session_id = t.session_id
        AND n.turn_index BETWEEN t.first_turn AND t.last_turn
    WHERE NOT (EXISTS (SELECT FROM near AS x WHERE x.session_id = t.session_id
            AND x.found_turn = t.turn_index AND x.turn_index = t.first_turn)
        AND EXISTS (SELECT FROM near AS x WHERE x.session_id = t.session_id
            AND x.found_turn = t.turn_index AND x.turn_index = t.last_turn))
),
seg (n_messages, message_ids, session_ids, session_pos, turn_index, created_epoch, token_count,
    stub_tokens, doc_length, sensitivities, sensitivity_pos, speakers, speaker_pos, roles, role_pos, embedded,
    embedding_norm, embeddings, embedding_scale, lexemes, posting_offsets, postings) AS (
    -- (none found: an empty set, not NULL, which would read the whole range)
    {segment_of("(SELECT coalesce(array_agg(f.message_id), '{}') AS ids, "
                "coalesce(array_agg(f.created_at), '{}') AS created FROM found AS f) AS f "
                "CROSS JOIN LATERAL mnemo_internal.message_segment($1, 0, $9, NULL, $3, f.ids, f.created)")}
    UNION ALL
    {tail_after("SELECT $9 AS after_id")}
)
{SEGMENT_ROWS}"""
RECALLED_MESSAGES_TYPES = MESSAGE_SEGMENTS_TYPES + ["bigint[]", "float8[]", "bigint"]

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
    array_agg(r.stub_tokens) AS stub_tokens, array_agg(r.derived_from) AS derived_from,
    array_agg(r.earlier_text) AS earlier_text, array_agg(r.earlier_until_epoch) AS earlier_until_epoch
FROM (
    SELECT 'mem:' || mm.memory_id AS source, mm.kind, mm.content_full AS text, mm.content_detail,
        mm.content_compact, mm.content_stub, mm.losses::text AS losses, mm.sensitivity,
        extract(epoch FROM ma.last_accessed_at)::float8 AS accessed_epoch,
        extract(epoch FROM mm.created_at)::float8 AS created_epoch,
        mm.confidence::float8 AS confidence, mm.provenance_type,
        NULL::text AS role, NULL::text AS name,
        -- each text's tokens as a line's text part (migration 0012; NULL: count it)
        mm.line_tokens[1] AS full_tokens, mm.line_tokens[2] AS detail_tokens,
        mm.line_tokens[3] AS compact_tokens, mm.line_tokens[4] AS stub_tokens,
        -- its and its earlier value's (e) source messages, space-separated (arrays of arrays must be even)
        nullif(array_to_string(mm.source_message_ids || e.source_message_ids, ' '), '') AS derived_from,
        e.text AS earlier_text, extract(epoch FROM e.valid_to)::float8 AS earlier_until_epoch
    FROM mnemo.memories AS mm
    -- (the ids again on the access rows: without them a generic plan hashed every
    -- access row of the tenant, 7,790 for ~40 memories at 100k messages)
    LEFT JOIN mnemo.memory_access AS ma ON ma.tenant_id = $1 AND ma.memory_id = mm.memory_id
        AND ma.memory_id = ANY($2){earlier}
    WHERE mm.tenant_id = $1 AND mm.memory_id = ANY($2)
    UNION ALL
    -- its levels as its embed job stored them (NULL until it has run)
    SELECT 'msg:' || m.message_id, 'message', m.content, m.levels #>> '{detail,text}',
        m.levels #>> '{compact,text}', m.levels #>> '{stub,text}',
        jsonb_build_object('detail', m.levels #> '{detail,losses}', 'compact', m.levels #> '{compact,losses}',
            'stub', m.levels #> '{stub,losses}')::text, m.sensitivity,
        NULL, k.created_epoch, 1.0,
        -- A message is a verbatim record: one authority for every speaker (a role says
        -- who spoke, not how reliable it is), tool outputs aside.
        CASE m.role WHEN 'tool' THEN 'tool_output' ELSE 'fact' END, m.role, m.name, m.line_tokens,
        NULL, NULL, NULL, NULL, NULL, NULL
    FROM unnest($3::bigint[], $4::float8[]) AS k (message_id, created_epoch)
    JOIN mnemo.messages AS m ON m.tenant_id = $1 AND m.message_id = k.message_id
        AND m.created_at = to_timestamp(k.created_epoch) AND NOT m.is_pruned
) AS r
""".replace("{earlier}", EARLIER_VALUE)
CANDIDATE_ROWS_TYPES = ["text", "bigint[]", "bigint[]", "float8[]", "text[]", "timestamptz", "text"]

# The sentence vectors the embed job stored for the turns retrieval.match_sentences
# matches (sentence_turns: 20 at most), each turn's as one bytea (pgvector's send
# format without its 4-byte header, one sentence after the other), looked up by the
# whole primary key as CANDIDATE_ROWS looks messages up. A turn not embedded yet, or
# of one sentence, has none.
SENTENCE_VECTORS = """
SELECT m.message_id, cardinality(m.sentence_embeddings) AS n,
    (SELECT string_agg(substring(vector_send(s.v) FROM 5), ''::bytea ORDER BY s.i)
     FROM unnest(m.sentence_embeddings) WITH ORDINALITY AS s (v, i)) AS vectors
FROM unnest($2::bigint[], $3::float8[]) AS k (message_id, created_epoch)
JOIN mnemo.messages AS m ON m.tenant_id = $1 AND m.message_id = k.message_id
    AND m.created_at = to_timestamp(k.created_epoch)
WHERE m.sentence_embeddings IS NOT NULL
"""

# The as_of option as a timestamp, through the API's one range check (MN001 when it
# is not a timestamp or outside years 2-9998 UTC).
CHECK_AS_OF = "SELECT mnemo_internal.checked_timestamp($1, 'option as_of') AS ts"

# The context_log row (its memory items are folded into the access statistics by
# the 'access' sweep, off the hot path).
LOG = """
INSERT INTO mnemo.context_log (tenant_id, session_id, query, task_type, budget, tokens_used,
    sections, items, omissions, provenance, latency_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb, $10::jsonb, $11)
RETURNING context_id
"""


# The rows HISTORY reads first: a long session fills B with far fewer rows than B's
# floor allows, and reading, windowing and carrying the others was most of the
# statement's time (read_history reads on only if these may not fill B).
HISTORY_FIRST_ROWS = 256


def history_rows(available: int) -> int:
    """History rows worth fetching for a budget B."""
    return min(max(available // MIN_MESSAGE_TOKENS, 16), MAX_HISTORY_ROWS)


def history_args(tenant_id: str, session_id: str, as_of, available: int, channel: str) -> list:
    """The HISTORY statement's arguments for a budget B on a channel."""
    return [tenant_id, session_id, as_of, history_rows(available), available,
            list(CHANNEL_SENSITIVITY[channel]), summarize.MIN_TOKENS_FOR_SUMMARY,
            RECENT_TURNS]


def pool_args(tenant_id: str, session_id: str, query: str | None, words: list[str], as_of,
              channel: str, time_words: str | None = None) -> list:
    """The CANDIDATE_POOL statement's arguments (words: query_words(query); time_words:
    the words whose lexemes are looked up besides the query's, to tell the lines
    that date something, temporal.TIME_WORDS for a question that asks when)."""
    return [tenant_id, session_id, trigram_query(query, words), query, as_of,
            list(CHANNEL_SENSITIVITY[channel]), list(CHANNEL_EXCLUDED_KINDS.get(channel, ())),
            words, time_words]


def segments_args(tenant_id: str, session_id: str, lexemes: list[str] | None, channel: str,
                  agent_id: str | None, recall_scope: str) -> list:
    """The MESSAGE_SEGMENTS statement's arguments."""
    return [tenant_id, session_id, lexemes or [], list(CHANNEL_SOURCES[channel]), agent_id, recall_scope]


def rows_args(tenant_id: str, fused: list[dict], channel: str, as_of=None) -> list:
    """The CANDIDATE_ROWS statement's arguments for the fused candidates (on a channel, at as_of)."""
    messages = [c for c in fused if c["created_epoch"] is not None]
    return [tenant_id, [c["id"] for c in fused if c["created_epoch"] is None],
            [c["id"] for c in messages], [c["created_epoch"] for c in messages],
            list(CHANNEL_SENSITIVITY[channel]), as_of, UPDATED]


# The query's vector handed to the queued embed job of the message it was read from
# (phases.share_query_vector), with the md5 of the text it embeds: the job stores it
# instead of encoding the same text again, if that is still the text. Two statements,
# each routed to the tenant alone (Citus takes FOR UPDATE only so): the job, locked,
# unless a runner has claimed it (skipped, not waited for); then its payload.
QUERY_JOB = """
SELECT j.job_id FROM mnemo.jobs AS j
WHERE j.tenant_id = $1 AND j.kind = 'embed' AND j.status = 'queued' AND j.dedup_key = $2
FOR UPDATE SKIP LOCKED
"""
SHARE_QUERY_VECTOR = """
UPDATE mnemo.jobs AS j SET payload = j.payload || jsonb_build_object('vector', $3::text, 'text_md5', md5($4))
WHERE j.tenant_id = $1 AND j.job_id = $2
"""

# The statements by name, with their parameter types.
STATEMENTS = {
    "enter": (ENTER, ["text"]),
    "check_as_of": (CHECK_AS_OF, ["text"]),
    "session": (SESSION, ["text", "uuid", "timestamptz"]),
    "history": (HISTORY, HISTORY_TYPES),
    "last_user": (LAST_USER, ["text", "uuid", "timestamptz", "text[]"]),
    "candidate_pool": (CANDIDATE_POOL, CANDIDATE_POOL_TYPES),
    "message_segments": (MESSAGE_SEGMENTS, MESSAGE_SEGMENTS_TYPES),
    "candidate_pool_recalled": (CANDIDATE_POOL_RECALLED, CANDIDATE_POOL_RECALLED_TYPES),
    "recalled_messages": (RECALLED_MESSAGES, RECALLED_MESSAGES_TYPES),
    "candidate_rows": (CANDIDATE_ROWS, CANDIDATE_ROWS_TYPES),
    "sentence_vectors": (SENTENCE_VECTORS, ["text", "bigint[]", "float8[]"]),
    "log": (LOG, ["text", "uuid", "text", "text", "integer", "integer", "text", "text", "text", "text", "real"]),
    "raise_error": ("SELECT mnemo_internal.raise_error($1, $2, $3)", ["text", "text", "text"]),
    "query_job": (QUERY_JOB, ["text", "text"]),
    "share_query_vector": (SHARE_QUERY_VECTOR, ["text", "bigint", "text", "text"]),
}
# The statements prepared per tenant (TENANT in their text: the tenant as a literal).
TENANT_STATEMENTS = {
    "recall_hits": (RECALL_HITS, ["text", "text", "integer"]),
    "recall_knn": (RECALL_KNN, ["halfvec", "integer"]),
    "frequent_memories": (FREQUENT_MEMORIES, []),
}


# The statements that only read the tenant's rows and reference tables: on Citus, a
# compile running on the node that holds the tenant's shards reads them from the
# shards themselves (compiler.PlpyDatabase, on_shards). Not the writes (log, paging's)
# nor those that only call a routine (enter, check_as_of, raise_error), which go
# through Citus; nor paging_objects (paging only).
SHARD_READS = frozenset({"session", "history", "last_user", "candidate_pool", "message_segments",
                         "candidate_pool_recalled", "recalled_messages", "candidate_rows",
                         "sentence_vectors"} | TENANT_STATEMENTS.keys())

# A table named in a statement (schema-qualified: every statement names them so).
_RELATION = re.compile(r"\b(mnemo(?:_internal)?\.\w+)\b")


def on_shards(text: str, shards: dict[str, str]) -> str:
    """A statement's text with each table that `shards` maps ({"mnemo.sessions":
    "mnemo.sessions_102018", ...}: mnemo_internal.citus_local_shards) replaced by that
    shard; routines and other names kept."""
    return _RELATION.sub(lambda m: shards.get(m.group(1), m.group(1)), text)


def for_tenant(text: str, quoted_tenant: str) -> str:
    """A TENANT_STATEMENTS text for one tenant (quoted_tenant: its quoted literal)."""
    return text.replace(TENANT, quoted_tenant)
