"""The SQL of the Python sweeps (sweeps.Sweeps), by sweep: promotion, expiry and
demotion, summaries, compaction."""

SETTINGS = """
SELECT key, value::text AS value FROM mnemo_internal.settings WHERE key = ANY($1)
"""
LIFECYCLE_KEYS = [
    "promotion", "demotion", "episodic_ttl_days", "session_idle_hours", "session_memory_grace_hours",
    "compaction_factor", "compaction_keep_recent", "compaction_max_span_tokens",
]

# Promotion -------------------------------------------------------------------------------
PROMOTION_CANDIDATES = """
SELECT m.tenant_id, m.memory_id, m.tier, m.kind, a.access_count, a.relevance_accumulator,
    extract(epoch FROM m.created_at)::float8 AS created_epoch
FROM mnemo.memories AS m
JOIN mnemo.memory_access AS a ON a.tenant_id = m.tenant_id AND a.memory_id = m.memory_id
WHERE m.is_active AND m.superseded_by IS NULL AND m.tier = ANY($1) AND a.access_count >= $2
    AND ($3::text IS NULL OR m.tenant_id = $3)
    AND (m.tenant_id, m.memory_id) > ($4, $5)
ORDER BY m.tenant_id, m.memory_id
LIMIT $6
"""
PROMOTE = """
WITH p AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::float8[], $6::float8[])
        AS p (tenant_id, memory_id, old_tier, tier, utility, expires_epoch)
), u AS (
    UPDATE mnemo.memories AS m
    SET tier = p.tier, scope = 'global', is_validated = true, updated_at = $7,
        expires_at = to_timestamp(p.expires_epoch)
    FROM p
    WHERE m.tenant_id = p.tenant_id AND m.memory_id = p.memory_id AND m.is_active AND m.tier = p.old_tier
    RETURNING m.tenant_id, m.memory_id, p.old_tier, p.tier, p.utility
)
INSERT INTO mnemo.memory_versions (tenant_id, memory_id, version, change, reason, old_value, new_value,
    created_at)
SELECT u.tenant_id, u.memory_id,
    mnemo_internal.next_memory_version(u.tenant_id, u.memory_id),
    'promote', format('utility %s above the %s threshold', round(u.utility::numeric, 4), u.old_tier),
    jsonb_build_object('tier', u.old_tier),
    jsonb_build_object('tier', u.tier, 'scope', 'global', 'is_validated', true), $7
FROM u
RETURNING memory_id
"""

# Expiry and demotion -----------------------------------------------------------------
EXPIRE_SESSIONS = """
WITH s AS (
    SELECT x.tenant_id, x.session_id FROM mnemo.sessions AS x
    WHERE x.status IN ('active', 'paused') AND ($2::text IS NULL OR x.tenant_id = $2)
        AND (x.expires_at <= $1 OR x.updated_at <= $1 - $3 * interval '1 hour')
    ORDER BY x.tenant_id, x.session_id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE mnemo.sessions AS x SET status = 'expired', expires_at = least(coalesce(x.expires_at, $1), $1)
FROM s WHERE x.tenant_id = s.tenant_id AND x.session_id = s.session_id
RETURNING x.session_id
"""
# Session-tier memories live on for a grace period after their session ends (docs/design.md §Tiers).
SESSION_MEMORY_TTL = """
WITH m AS (
    SELECT mm.tenant_id, mm.memory_id FROM mnemo.memories AS mm
    JOIN mnemo.sessions AS s ON s.tenant_id = mm.tenant_id AND s.session_id = mm.session_id
    WHERE mm.is_active AND mm.tier = 'session' AND mm.expires_at IS NULL
        AND s.status IN ('closed', 'expired') AND ($2::text IS NULL OR mm.tenant_id = $2)
    LIMIT $4
)
UPDATE mnemo.memories AS x SET expires_at = $1 + $3 * interval '1 hour', updated_at = $1
FROM m WHERE x.tenant_id = m.tenant_id AND x.memory_id = m.memory_id
RETURNING x.memory_id
"""
DUE_MEMORIES = """
SELECT coalesce(array_agg(x.tenant_id), '{}') AS tenants, coalesce(array_agg(x.memory_id), '{}') AS ids
FROM (
    SELECT m.tenant_id, m.memory_id FROM mnemo.memories AS m
    WHERE m.is_active AND NOT m.is_pinned AND m.expires_at <= $1 AND ($2::text IS NULL OR m.tenant_id = $2)
    ORDER BY m.tenant_id, m.memory_id
    LIMIT $3
) AS x
"""
# Deactivate and archive (a snapshot of the row as it was), with a version entry.
ARCHIVE = """
WITH p AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[]) AS p (tenant_id, memory_id, reason)
), a AS (
    INSERT INTO mnemo.memory_archive AS ar (tenant_id, memory_id, archived_at, reason, snapshot)
    SELECT m.tenant_id, m.memory_id, $4, p.reason, to_jsonb(m) - 'embedding' - 'search_tsv'
        || jsonb_build_object('access_count', coalesce(a.access_count, 0),
            'relevance_accumulator', coalesce(a.relevance_accumulator, 0), 'last_accessed_at', a.last_accessed_at)
    FROM mnemo.memories AS m JOIN p ON p.tenant_id = m.tenant_id AND p.memory_id = m.memory_id
    LEFT JOIN mnemo.memory_access AS a ON a.tenant_id = m.tenant_id AND a.memory_id = m.memory_id
    WHERE m.is_active
    -- qualified by an alias: Citus names the shard in the statement it sends a worker,
    -- and an unqualified RETURNING came back as "memory_archive".col (42P01)
    RETURNING ar.tenant_id, ar.memory_id, ar.reason
), d AS (
    UPDATE mnemo.memories AS m SET is_active = false, updated_at = $4
    FROM a WHERE m.tenant_id = a.tenant_id AND m.memory_id = a.memory_id
    RETURNING m.tenant_id, m.memory_id, m.tier, a.reason
)
INSERT INTO mnemo.memory_versions (tenant_id, memory_id, version, change, reason, old_value, new_value,
    created_at)
SELECT d.tenant_id, d.memory_id,
    mnemo_internal.next_memory_version(d.tenant_id, d.memory_id),
    'expire', d.reason, jsonb_build_object('is_active', true, 'tier', d.tier),
    jsonb_build_object('is_active', false, 'archived', true), $4
FROM d
RETURNING memory_id
"""
DEMOTION_CANDIDATES = """
SELECT m.tenant_id, m.memory_id, m.tier, coalesce(a.access_count, 0) AS access_count, m.is_pinned,
    extract(epoch FROM m.created_at)::float8 AS created_epoch,
    extract(epoch FROM a.last_accessed_at)::float8 AS last_epoch
FROM mnemo.memories AS m
LEFT JOIN mnemo.memory_access AS a ON a.tenant_id = m.tenant_id AND a.memory_id = m.memory_id
WHERE m.is_active AND NOT m.is_pinned AND m.tier = ANY($1)
    AND coalesce(a.last_accessed_at, m.created_at) <= $2 - $3 * interval '1 hour'
    AND ($4::text IS NULL OR m.tenant_id = $4)
    AND (m.tenant_id, m.memory_id) > ($5, $6)
ORDER BY m.tenant_id, m.memory_id
LIMIT $7
"""
DEMOTE = """
WITH p AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::float8[], $6::float8[])
        AS p (tenant_id, memory_id, old_tier, tier, activity, expires_epoch)
), u AS (
    UPDATE mnemo.memories AS m SET tier = p.tier, expires_at = to_timestamp(p.expires_epoch), updated_at = $7
    FROM p
    WHERE m.tenant_id = p.tenant_id AND m.memory_id = p.memory_id AND m.is_active AND m.tier = p.old_tier
    RETURNING m.tenant_id, m.memory_id, p.old_tier, p.tier, p.activity
)
INSERT INTO mnemo.memory_versions (tenant_id, memory_id, version, change, reason, old_value, new_value,
    created_at)
SELECT u.tenant_id, u.memory_id,
    mnemo_internal.next_memory_version(u.tenant_id, u.memory_id),
    'demote', format('activity %s below the %s floor', round(u.activity::numeric, 5), u.old_tier),
    jsonb_build_object('tier', u.old_tier), jsonb_build_object('tier', u.tier), $7
FROM u
RETURNING memory_id
"""

# Summaries of memories ---------------------------------------------------------------
UNSUMMARISED = """
SELECT m.tenant_id, m.memory_id, m.kind, m.content_full, m.sensitivity,
    to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') AS created
FROM mnemo.memories AS m
WHERE m.is_active AND m.losses = '{}' AND m.tokens_full >= $1
    AND ($2::text IS NULL OR m.tenant_id = $2)
    AND (m.tenant_id, m.memory_id) > ($3, $4)
ORDER BY m.tenant_id, m.memory_id
LIMIT $5
"""
# $10: each memory's {"summary": ...} object, built by the caller: Citus refuses a STABLE
# function (jsonb_build_object) given a column in an UPDATE's SET.
STORE_LEVELS = """
UPDATE mnemo.memories AS m
SET content_detail = l.detail, tokens_detail = l.detail_tokens,
    content_compact = l.compact, tokens_compact = l.compact_tokens,
    content_stub = l.stub, tokens_stub = l.stub_tokens, losses = l.losses,
    key_entities = l.key_entities, metadata = m.metadata || l.summary
FROM (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::integer[], $5::text[], $6::integer[],
        $7::text[], $8::integer[], $9::jsonb[], $10::jsonb[])
        AS u (tenant_id, memory_id, detail, detail_tokens, compact, compact_tokens, stub, stub_tokens, losses,
            summary)
    CROSS JOIN LATERAL (SELECT coalesce(array_agg(DISTINCT e), '{}') AS key_entities
        FROM jsonb_array_elements_text(u.losses -> 'detail' -> 'key_entities'
            || coalesce(u.losses -> 'stub' -> 'key_entities', '[]')) AS e) AS k
) AS l
WHERE m.tenant_id = l.tenant_id AND m.memory_id = l.memory_id
RETURNING m.memory_id
"""

# History compaction --------------------------------------------------------------------
# A session's active history grows only by its new messages, and record_message
# stamps the session's updated_at with each: a session not updated since the
# previous completed run (of all tenants, or of this one) was within its target
# then and still is, so only sessions updated since are summed (an hour's margin for
# a message whose transaction began before that run and committed after it). Every
# active session again after a compaction_* setting changed, and on the first run.
# Summing every active session's history each run cost 4.3 s on the bench corpus
# (4,500 sessions, 1M messages), every 10 minutes, for nothing.
COMPACTION_SINCE = """
SELECT CASE WHEN EXISTS (SELECT FROM mnemo_internal.settings AS st
        WHERE st.key LIKE 'compaction%' AND st.updated_at >= r.started_at)
    THEN '-infinity' ELSE coalesce(r.started_at - interval '1 hour', '-infinity') END::text AS since
FROM (SELECT max(lr.started_at) AS started_at FROM mnemo_internal.lifecycle_runs AS lr
    WHERE lr.sweep = 'compaction' AND lr.status = 'done'
        AND (lr.tenant_id IS NULL OR lr.tenant_id = $1)) AS r
"""
COMPACTION_CANDIDATES = """
SELECT s.tenant_id, s.session_id, s.context_window,
    (SELECT coalesce(sum(m.token_count), 0) FROM mnemo.messages AS m
        WHERE m.tenant_id = s.tenant_id AND m.session_id = s.session_id
            AND NOT m.is_compacted AND NOT m.is_pruned)::bigint AS active_tokens
FROM mnemo.sessions AS s
WHERE s.status = 'active' AND ($1::text IS NULL OR s.tenant_id = $1)
    AND (s.tenant_id, s.session_id) > ($2, $3::uuid)
    AND s.updated_at >= $5::timestamptz
ORDER BY s.tenant_id, s.session_id
LIMIT $4
"""
SESSION_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext('mnemo.compact'), hashtext($1 || '/' || $2)) AS ok"
ACTIVE_HISTORY = """
SELECT m.message_id, m.turn_index, m.role, m.content, m.name, m.tool_calls::text AS tool_calls,
    m.tool_call_id, m.token_count, m.sensitivity, m.metadata::text AS metadata,
    to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') AS created,
    (SELECT tc.name FROM mnemo.tool_calls AS tc
        WHERE tc.tenant_id = m.tenant_id AND tc.session_id = m.session_id
            AND tc.tool_call_id = m.tool_call_id) AS tool_name
FROM mnemo.messages AS m
WHERE m.tenant_id = $1 AND m.session_id = $2 AND NOT m.is_compacted AND NOT m.is_pruned
ORDER BY m.turn_index, m.message_id
"""
# The summary's id drawn as record_messages draws one (in the tenant's order; on Citus
# on the tenant's worker, where a default nextval would be the coordinator's), first:
# Citus evaluates the functions of an INSERT on the coordinator.
SUMMARY_MESSAGE_ID = "SELECT (mnemo_internal.message_ids($1, 1))[1] AS message_id"
INSERT_SUMMARY_MESSAGE = """
INSERT INTO mnemo.messages (tenant_id, message_id, session_id, turn_index, role, content, token_count, content_hash,
    sensitivity, metadata, created_at)
VALUES ($1, $7, $2, -1, 'system', $3,
    mnemo_internal.message_tokens(jsonb_build_object('role', 'system', 'content', $3)),
    sha256(convert_to($3, 'UTF8')), $4, $5::jsonb, $6)
RETURNING message_id, token_count
"""
FLAG_COMPACTED = """
UPDATE mnemo.messages AS m SET is_compacted = true, compacted_into = $3
WHERE m.tenant_id = $1 AND m.session_id = $2 AND m.message_id = ANY($4) AND NOT m.is_compacted
RETURNING m.message_id
"""
INSERT_SUMMARY_MEMORY = """
SELECT mnemo_internal.insert_memory($1, $2, 'summary', $3, 'system_inferred', $4::jsonb, $5, $6,
    ARRAY['compaction']) AS memory_id
"""
UPDATE_SESSION_SUMMARY = """
UPDATE mnemo.sessions AS s
SET summary_text = $3, summary_tokens = mnemo.count_tokens($3), summary_upto_turn = $4,
    summary_embedding = mnemo.embed($3)
WHERE s.tenant_id = $1 AND s.session_id = $2
"""
LOG_COMPACTION = """
INSERT INTO mnemo.compaction_log (tenant_id, session_id, summary_message_id, summary_memory_id,
    first_turn, last_turn, messages_compacted, tokens_removed, summary_tokens, ratio,
    active_tokens_before, active_tokens_after, method, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $14, $13)
"""
