"""The SQL memory formation runs (formation.Former), each statement by name: the
messages after the watermark, deduplication, conflicts, the writes of a memory and
its payloads, entities and the admission log."""

# A user message that paging segmented into a tool object (paging/store.py) is the
# environment's answer to an action an agent wrote in its text (SWE-agent and the
# like): it is read as that tool's output, not as something the user said.
MESSAGES = """
SELECT m.message_id, m.turn_index, CASE WHEN env.tool IS NULL THEN m.role ELSE 'tool' END AS role,
    m.name, m.content, m.session_id::text AS session_id,
    m.sensitivity, extract(epoch FROM m.created_at)::float8 AS created_epoch,
    coalesce(tc.name, env.tool) AS tool_name,
    (SELECT c #>> '{function,arguments}' FROM mnemo.messages AS a, jsonb_array_elements(a.tool_calls) AS c
        WHERE a.tenant_id = m.tenant_id AND a.message_id = tc.message_id
            AND c ->> 'id' = m.tool_call_id LIMIT 1) AS tool_args
FROM mnemo.messages AS m
LEFT JOIN mnemo.tool_calls AS tc
    ON tc.tenant_id = m.tenant_id AND tc.session_id = m.session_id AND tc.tool_call_id = m.tool_call_id
LEFT JOIN LATERAL (
    SELECT rtrim(split_part(o.label, ' ', 1), ':') AS tool FROM mnemo.semantic_objects AS o
    WHERE m.role = 'user' AND o.tenant_id = m.tenant_id AND o.session_id = m.session_id
        AND o.message_ids @> ARRAY[m.message_id] AND o.kind <> 'conversation_phase'
    LIMIT 1) AS env ON true
WHERE m.tenant_id = $1 AND m.session_id = $2 AND m.turn_index > $3 AND m.turn_index <= $4
ORDER BY m.turn_index
"""
STATE = """
SELECT coalesce((SELECT e.upto_turn FROM mnemo.extraction_state AS e
        WHERE e.tenant_id = $1 AND e.session_id = $2), -1) AS upto,
    (SELECT s.turn_count - 1 FROM mnemo.sessions AS s WHERE s.tenant_id = $1 AND s.session_id = $2) AS last,
    (SELECT t.config -> 'formation' FROM mnemo.tenants AS t WHERE t.tenant_id = $1)::text AS config,
    mnemo_internal.setting('extraction_method') #>> '{}' AS method,
    (mnemo_internal.setting('dedup_threshold') #>> '{}')::float8 AS dedup,
    (mnemo_internal.setting('admission_threshold') #>> '{}')::float8 AS admit,
    (mnemo_internal.setting('extract_batch_messages') #>> '{}')::integer AS batch,
    (mnemo_internal.setting('extract_job_messages') #>> '{}')::integer AS per_run
"""
# updated_at = excluded.updated_at (the column's default, now()): Citus takes only IMMUTABLE
# functions in ON CONFLICT DO UPDATE SET; the same value on one server.
SAVE_STATE = """
INSERT INTO mnemo.extraction_state AS e (tenant_id, session_id, upto_turn, method, runs)
VALUES ($1, $2, $3, $4, 1)
ON CONFLICT (tenant_id, session_id) DO UPDATE
SET upto_turn = greatest(e.upto_turn, excluded.upto_turn), method = excluded.method,
    runs = e.runs + 1, updated_at = excluded.updated_at
"""
HASH = "SELECT mnemo_internal.content_hash($1) AS h"
SEEN = """
SELECT EXISTS (SELECT FROM mnemo.admission_log AS a
    WHERE a.tenant_id = $1 AND a.candidate_hash = $2 AND a.source_message_ids && $3) AS seen
"""
EXACT = """
SELECT m.memory_id FROM mnemo.memories AS m
WHERE m.tenant_id = $1 AND m.content_hash = $2 AND m.is_active AND m.superseded_by IS NULL
ORDER BY m.memory_id LIMIT 1
"""
EMBED = "SELECT v::text AS v FROM unnest(mnemo.embed_batch($1)) WITH ORDINALITY AS e (v, i) ORDER BY i"
NEAREST = """
SELECT m.memory_id, m.kind, 1 - (m.embedding <=> $2) AS cosine
FROM mnemo.memories AS m
WHERE m.tenant_id = $1 AND m.is_active AND m.superseded_by IS NULL AND m.embedding IS NOT NULL
    AND (m.valid_to IS NULL OR m.valid_to > now())
ORDER BY m.embedding <=> $2 LIMIT 5
"""
# The current notes among a candidate's nearest, with the time and session each was
# said in (Former.updated_notes).
NOTES = """
SELECT m.memory_id, m.content_full, extract(epoch FROM m.valid_from)::float8 AS valid_epoch,
    m.session_id::text AS session_id
FROM mnemo.memories AS m
WHERE m.tenant_id = $1 AND m.memory_id = ANY($2) AND m.is_active AND m.superseded_by IS NULL
ORDER BY m.memory_id
"""
CURRENT_FACTS = """
SELECT m.memory_id, f.object, extract(epoch FROM m.valid_from)::float8 AS valid_epoch,
    m.provenance_type, m.confidence::float8 AS confidence
FROM mnemo.memory_facts AS f
JOIN mnemo.memories AS m ON m.tenant_id = f.tenant_id AND m.memory_id = f.memory_id
WHERE f.tenant_id = $1 AND lower(f.subject) = lower($2) AND f.predicate = $3
    AND m.is_active AND m.superseded_by IS NULL
ORDER BY m.memory_id
"""
# What form() reads about the tenant's memories, for every candidate of a batch in one
# statement (formation.Batch): each one's hash, whether admission has seen it, its exact
# duplicate, its NEAREST five (the same query, the HNSW index per candidate through
# LATERAL) and the CURRENT_FACTS of its subject and predicate (NULL for a candidate that
# is no functional fact). One tenant throughout ($1): a router query under Citus; the
# candidates come in as arrays, unnested in FROM, never into an INSERT or UPDATE.
# OFFSET 0 keeps the candidates' subquery whole: flattened, each candidate's vector was
# parsed and its hash computed again for every memory compared (30 ms a candidate at 170).
BATCH = """
SELECT c.i, c.h,
    cardinality(c.src) > 0 AND EXISTS (SELECT FROM mnemo.admission_log AS a
        WHERE a.tenant_id = $1 AND a.candidate_hash = c.h AND a.source_message_ids && c.src) AS seen,
    (SELECT m.memory_id FROM mnemo.memories AS m
        WHERE m.tenant_id = $1 AND m.content_hash = c.h AND m.is_active AND m.superseded_by IS NULL
        ORDER BY m.memory_id LIMIT 1) AS exact,
    n.ids AS near_ids, n.kinds AS near_kinds, n.cos AS near_cos,
    f.ids AS fact_ids, f.objects AS fact_objects, f.epochs AS fact_epochs,
    f.provenances AS fact_provenances, f.confidences AS fact_confidences
FROM (SELECT x.i, mnemo_internal.content_hash(x.content) AS h, coalesce(x.src::bigint[], '{}') AS src,
        x.v::vector AS v, x.subject, x.predicate
    FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
        WITH ORDINALITY AS x (content, src, v, subject, predicate, i)
    OFFSET 0) AS c
LEFT JOIN LATERAL (
    SELECT array_agg(k.memory_id) AS ids, array_agg(k.kind) AS kinds, array_agg(k.cosine) AS cos
    FROM (SELECT m.memory_id, m.kind, 1 - (m.embedding <=> c.v) AS cosine
        FROM mnemo.memories AS m
        WHERE c.v IS NOT NULL AND m.tenant_id = $1 AND m.is_active AND m.superseded_by IS NULL
            AND m.embedding IS NOT NULL AND (m.valid_to IS NULL OR m.valid_to > now())
        ORDER BY m.embedding <=> c.v LIMIT 5) AS k
) AS n ON true
LEFT JOIN LATERAL (
    SELECT array_agg(k.memory_id) AS ids, array_agg(k.object) AS objects, array_agg(k.valid_epoch) AS epochs,
        array_agg(k.provenance_type) AS provenances, array_agg(k.confidence) AS confidences
    FROM (SELECT m.memory_id, f.object, extract(epoch FROM m.valid_from)::float8 AS valid_epoch,
            m.provenance_type, m.confidence::float8 AS confidence
        FROM mnemo.memory_facts AS f
        JOIN mnemo.memories AS m ON m.tenant_id = f.tenant_id AND m.memory_id = f.memory_id
        WHERE c.subject IS NOT NULL AND f.tenant_id = $1 AND lower(f.subject) = lower(c.subject)
            AND f.predicate = c.predicate AND m.is_active AND m.superseded_by IS NULL
        ORDER BY m.memory_id) AS k
) AS f ON true
ORDER BY c.i
"""
# The cosine of each candidate of a batch to each one before it, by pgvector (the same
# arithmetic NEAREST does once the earlier one is a memory): no table, no tenant.
PAIRS = """
WITH v AS MATERIALIZED (SELECT x.i, x.v::vector AS v FROM unnest($1::text[]) WITH ORDINALITY AS x (v, i))
SELECT b.i, ARRAY(SELECT 1 - (a.v <=> b.v) FROM v AS a WHERE a.i < b.i ORDER BY a.i) AS cos
FROM v AS b ORDER BY b.i
"""
SAME_KEY = """
SELECT m.memory_id FROM mnemo.memories AS m
WHERE m.tenant_id = $1 AND m.source_key = $2 AND m.is_active AND m.superseded_by IS NULL
    AND m.memory_id <> $3
"""
# A merge is a reinforcement: the memory's access count goes up by one (its
# statistics live in mnemo.memory_access, migration 0013).
MERGE = """
WITH merged AS (
    UPDATE mnemo.memories AS m
    SET updated_at = now(),
        source_message_ids = ARRAY(SELECT DISTINCT x FROM unnest(m.source_message_ids || $3) AS x ORDER BY x)
    WHERE m.tenant_id = $1 AND m.memory_id = $2
    RETURNING m.tenant_id, m.memory_id
)
INSERT INTO mnemo.memory_access AS a (tenant_id, memory_id, access_count)
SELECT merged.tenant_id, merged.memory_id, 1 FROM merged
ON CONFLICT (tenant_id, memory_id) DO UPDATE SET access_count = a.access_count + 1
"""
VERSION = """
INSERT INTO mnemo.memory_versions (tenant_id, memory_id, version, change, reason, old_value, new_value)
VALUES ($1, $2, mnemo_internal.next_memory_version($1, $2), $3, $4, $5::jsonb, $6::jsonb)
"""
SUPERSEDE = """
UPDATE mnemo.memories AS m
SET superseded_by = $3, valid_to = least(coalesce(m.valid_to, $4), $4), updated_at = now(),
    metadata = m.metadata || $5::jsonb
WHERE m.tenant_id = $1 AND m.memory_id = $2
RETURNING m.content_full
"""
SUPERSEDE_PAYLOADS = """
WITH f AS (
    UPDATE mnemo.memory_facts AS f SET valid_to = $3 WHERE f.tenant_id = $1 AND f.memory_id = $2
), d AS (
    UPDATE mnemo.memory_decisions AS d SET status = 'superseded' WHERE d.tenant_id = $1 AND d.memory_id = $2
), e AS (
    UPDATE mnemo.entity_edges AS e SET valid_to = $3 WHERE e.tenant_id = $1 AND e.memory_id = $2
)
INSERT INTO mnemo.memory_links (tenant_id, src_memory_id, relation, dst_memory_id, metadata)
VALUES ($1, $4, 'supersedes', $2, $5::jsonb) ON CONFLICT DO NOTHING
"""
INSERT = """
SELECT mnemo_internal.insert_memory($1, $2, $3, $4, $5, $6::jsonb, $7, $8, '{}', $9::jsonb) AS id
"""
FACT = """
INSERT INTO mnemo.memory_facts (tenant_id, memory_id, subject, predicate, object,
    subject_entity_id, object_entity_id, valid_from, valid_to)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
"""
DECISION = """
INSERT INTO mnemo.memory_decisions (tenant_id, memory_id, decision, status, rationale, alternatives)
VALUES ($1, $2, $3, $4, $5, $6)
"""
TASK = """
INSERT INTO mnemo.memory_tasks (tenant_id, memory_id, title, status, due_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
"""
ENTITY = """
WITH e AS (
    INSERT INTO mnemo.entities AS e (tenant_id, kind, name, normalized) VALUES ($1, $2, $3, $4)
    ON CONFLICT (tenant_id, kind, normalized) DO UPDATE SET name = e.name
    RETURNING e.entity_id
), a AS (
    INSERT INTO mnemo.entity_aliases (tenant_id, alias_normalized, entity_id, alias)
    SELECT $1, $4, e.entity_id, $3 FROM e ON CONFLICT DO NOTHING
)
SELECT e.entity_id FROM e
"""
MENTION = """
INSERT INTO mnemo.entity_mentions (tenant_id, memory_id, entity_id, role)
VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING
"""
EDGE = """
INSERT INTO mnemo.entity_edges AS e (tenant_id, src_entity_id, relation, dst_entity_id, memory_id,
    valid_from)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant_id, src_entity_id, relation, dst_entity_id) DO UPDATE
SET weight = e.weight + 1, memory_id = excluded.memory_id, valid_from = excluded.valid_from, valid_to = NULL
"""
ADMISSION = """
INSERT INTO mnemo.admission_log (tenant_id, session_id, memory_id, admitted, score_total, score_type,
    score_novelty, score_utility, score_recency, threshold, content_preview, kind, candidate_hash,
    source_message_ids, decision, method)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, left($11, 200), $12, $13, $14, $15, $16)
"""
LEXICON = """
SELECT mnemo_internal.add_to_lexicon(array_agg(m.tenant_id), array_agg(m.search_tsv))
FROM mnemo.memories AS m WHERE m.tenant_id = $1 AND m.memory_id = ANY($2) AND m.embedding IS NOT NULL
"""
MEMORY = """
SELECT m.memory_id, m.session_id::text AS session_id, m.kind, m.content_full, m.provenance_type,
    m.sensitivity, m.scope, m.tier, m.tags, m.superseded_by, m.source_key, m.source_message_ids,
    m.confidence::float8 AS confidence, f.subject, f.predicate, f.object
FROM mnemo.memories AS m
LEFT JOIN mnemo.memory_facts AS f ON f.tenant_id = m.tenant_id AND f.memory_id = m.memory_id
WHERE m.tenant_id = $1 AND m.memory_id = $2
FOR UPDATE OF m
"""
