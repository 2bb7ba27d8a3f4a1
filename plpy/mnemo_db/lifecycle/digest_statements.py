"""The statements of the digests sweep (sweeps.Sweeps.digests_batch; digests.py for
the rules)."""

# The run's starting point: memories changed since the last finished run (for this
# tenant or all) began, less an hour for writes that committed late; -infinity the
# first time.
DIGEST_SINCE = """
SELECT coalesce(max(lr.started_at) - interval '1 hour', '-infinity')::text AS since
FROM mnemo_internal.lifecycle_runs AS lr
WHERE lr.sweep = 'digests' AND lr.status = 'done' AND (lr.tenant_id IS NULL OR lr.tenant_id = $1)
"""
# The next tenant after the cursor ($2) with a memory, digests aside, changed since $3
# (tenant by tenant: a batch is one tenant's, by its memories' tenant index).
DIGEST_NEXT_TENANT = """
SELECT t.tenant_id FROM mnemo.tenants AS t
WHERE ($1::text IS NULL OR t.tenant_id = $1) AND t.tenant_id > $2
    AND EXISTS (SELECT FROM mnemo.memories AS m WHERE m.tenant_id = t.tenant_id
        AND m.updated_at >= $3::timestamptz AND (m.source_key IS NULL OR m.source_key NOT LIKE 'digest:%'))
ORDER BY t.tenant_id
LIMIT 1
"""
# The pool (digests.py): a tenant's newest active memories that every reader of a
# digest may see, with their entities and the stems of their text (the said-day
# suffix left out: its month and year would join every note of a month).
DIGEST_POOL = """
SELECT m.memory_id, m.session_id::text AS session_id, m.kind, m.content_full, m.sensitivity,
    m.superseded_by IS NOT NULL AS superseded, m.confidence::float8 AS confidence, m.source_message_ids,
    to_char(m.valid_from AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day,
    to_char(m.valid_from AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS said_at,
    tsvector_to_array(to_tsvector('english',
        regexp_replace(m.content_full, ' \\(said [0-9]{1,2} [A-Za-z]+ [0-9]{4}\\)$', ''))) AS lexemes,
    ARRAY(SELECT DISTINCT em.entity_id FROM mnemo.entity_mentions AS em
        WHERE em.tenant_id = m.tenant_id AND em.memory_id = m.memory_id) AS entities
FROM mnemo.memories AS m
WHERE m.tenant_id = $1 AND m.is_active AND m.scope = 'global' AND m.sensitivity <> 'secret'
    AND m.kind <> 'summary' AND (m.source_key IS NULL OR m.source_key NOT LIKE 'digest:%')
    AND (m.expires_at IS NULL OR m.expires_at > $2)
ORDER BY m.valid_from DESC, m.memory_id DESC
LIMIT $3
"""
DIGEST_ENTITY_NAMES = """
SELECT e.entity_id, e.name FROM mnemo.entities AS e WHERE e.tenant_id = $1 AND e.entity_id = ANY($2)
"""
# The tenant's digests now, to compare with what the pool asks for.
DIGEST_EXISTING = """
SELECT m.memory_id, m.source_key, m.kind, m.content_full, m.sensitivity, m.source_message_ids
FROM mnemo.memories AS m
WHERE m.tenant_id = $1 AND m.is_active AND m.source_key LIKE 'digest:%'
FOR UPDATE
"""
DIGEST_INSERT = """
SELECT mnemo_internal.insert_memory($1, NULL, $2, $3, 'system_inferred', $4::jsonb, $5, $6,
    ARRAY['digest'], $7::jsonb) AS memory_id
"""
# In place: the text and what follows from it; the lower fidelities and declared
# losses are cleared for the summaries sweep to write again, and an embed job is
# queued (the old vector serves until then). A digest is not counted into the lexicon
# (mnemo_internal.store_embedding), so there is nothing to move there.
DIGEST_UPDATE = """
WITH u AS (
    UPDATE mnemo.memories AS m
    SET kind = $3, content_full = $4, content_stub = mnemo_internal.memory_stub($4),
        tokens_full = mnemo.count_tokens($4), tokens_stub = mnemo.count_tokens(mnemo_internal.memory_stub($4)),
        content_hash = mnemo_internal.content_hash($4), source_message_ids = $5, sensitivity = $6,
        confidence = $7, valid_from = $8, metadata = m.metadata || $9::jsonb,
        content_detail = NULL, tokens_detail = NULL, content_compact = NULL, tokens_compact = NULL,
        losses = '{}', updated_at = $10
    WHERE m.tenant_id = $1 AND m.memory_id = $2 AND m.is_active
    RETURNING m.memory_id
)
SELECT mnemo_internal.enqueue_job($1, 'embed', 'memory:' || $2,
    jsonb_build_object('target', 'memory', 'memory_id', $2)) AS job_id
FROM u
"""
DIGEST_VERSION = """
INSERT INTO mnemo.memory_versions (tenant_id, memory_id, version, change, reason, old_value, new_value, created_at)
VALUES ($1, $2, mnemo_internal.next_memory_version($1, $2), $3, $4, $5::jsonb, $6::jsonb, $7)
"""
# The stems of words (digests.nouns), as the full-text index makes them.
DIGEST_STEMS = """
SELECT coalesce(array_agg(DISTINCT x), '{}') AS stems
FROM unnest($1::text[]) AS w (word), unnest(tsvector_to_array(to_tsvector('english', w.word))) AS x
"""
