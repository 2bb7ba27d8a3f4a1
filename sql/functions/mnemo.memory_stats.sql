-- mnemo.memory_stats(p_tenant_id, p_session_id) -> jsonb
-- What a tenant's (or one session's) memory holds, for the memory_stats MCP tool and
-- `mnemo status --tenant`: current memories per tier and per kind with their tokens
-- at full and stub fidelity (and how many are pinned, superseded or inactive), the
-- recorded messages with their tokens (compacted, pruned, artifacts and their
-- bytes), the sessions per status, the compiled contexts (count, last, mean tokens
-- and latency) and the tenant's job queue (queued and failed per kind).
-- With p_session_id, messages, memories and contexts are that session's; jobs and
-- sessions stay the tenant's.
-- Raises MN002 (unknown tenant), MN003 (unknown session), MN008. Reads only.
CREATE OR REPLACE FUNCTION mnemo.memory_stats(
    p_tenant_id text,
    p_session_id uuid DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    IF p_session_id IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.sessions AS s
        WHERE s.tenant_id = p_tenant_id AND s.session_id = p_session_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN003', MESSAGE = format('unknown session %s', p_session_id);
    END IF;
    RETURN jsonb_build_object(
        'tenant_id', p_tenant_id,
        'session_id', p_session_id,
        'memories', (
            SELECT jsonb_build_object(
                'current', count(*) FILTER (WHERE m.is_active AND m.superseded_by IS NULL),
                'superseded', count(*) FILTER (WHERE m.superseded_by IS NOT NULL),
                'inactive', count(*) FILTER (WHERE NOT m.is_active AND m.superseded_by IS NULL),
                'pinned', count(*) FILTER (WHERE m.is_pinned AND m.is_active AND m.superseded_by IS NULL),
                'tokens_full', coalesce(sum(m.tokens_full) FILTER (WHERE m.is_active AND m.superseded_by IS NULL), 0),
                'tokens_stub', coalesce(sum(m.tokens_stub) FILTER (WHERE m.is_active AND m.superseded_by IS NULL), 0),
                'by_tier', (SELECT jsonb_object_agg(t.tier, (SELECT count(*) FROM mnemo.memories AS x
                        WHERE x.tenant_id = p_tenant_id AND x.tier = t.tier AND x.is_active
                            AND x.superseded_by IS NULL AND (p_session_id IS NULL OR x.session_id = p_session_id)))
                    FROM unnest(ARRAY['session', 'episodic', 'semantic', 'procedural']) AS t (tier)),
                'by_kind', coalesce((SELECT jsonb_object_agg(k.kind, k.n) FROM (
                    SELECT x.kind, count(*) AS n FROM mnemo.memories AS x
                    WHERE x.tenant_id = p_tenant_id AND x.is_active AND x.superseded_by IS NULL
                        AND (p_session_id IS NULL OR x.session_id = p_session_id)
                    GROUP BY x.kind) AS k), '{}'))
            FROM mnemo.memories AS m
            WHERE m.tenant_id = p_tenant_id AND (p_session_id IS NULL OR m.session_id = p_session_id)),
        'messages', (
            SELECT jsonb_build_object(
                'count', count(*), 'tokens', coalesce(sum(x.token_count), 0),
                'compacted', count(*) FILTER (WHERE x.is_compacted),
                'pruned', count(*) FILTER (WHERE x.is_pruned),
                'embedded', count(*) FILTER (WHERE x.embedding IS NOT NULL),
                'artifacts', count(x.artifact_id),
                'artifact_bytes', coalesce((SELECT sum(a.byte_size) FROM mnemo.artifacts AS a
                    WHERE a.tenant_id = p_tenant_id AND (p_session_id IS NULL OR a.session_id = p_session_id)), 0))
            FROM mnemo.messages AS x
            WHERE x.tenant_id = p_tenant_id AND x.turn_index >= 0
                AND (p_session_id IS NULL OR x.session_id = p_session_id)),
        'sessions', (
            SELECT coalesce(jsonb_object_agg(s.status, s.n), '{}') FROM (
                SELECT y.status, count(*) AS n FROM mnemo.sessions AS y
                WHERE y.tenant_id = p_tenant_id GROUP BY y.status) AS s),
        'contexts', (
            SELECT jsonb_build_object('compiled', count(*), 'last_at', max(c.created_at),
                'mean_tokens', round(avg(c.tokens_used)), 'mean_latency_ms', round(avg(c.latency_ms)::numeric, 2))
            FROM mnemo.context_log AS c
            WHERE c.tenant_id = p_tenant_id AND (p_session_id IS NULL OR c.session_id = p_session_id)),
        'jobs', (
            SELECT jsonb_build_object(
                'queued', count(*) FILTER (WHERE j.status = 'queued'),
                'failed', count(*) FILTER (WHERE j.status = 'failed'),
                'oldest_queued', min(j.created_at) FILTER (WHERE j.status = 'queued'),
                'by_kind', coalesce((SELECT jsonb_object_agg(k.kind, jsonb_build_object('queued', k.queued,
                        'failed', k.failed)) FROM (
                    SELECT z.kind, count(*) FILTER (WHERE z.status = 'queued') AS queued,
                        count(*) FILTER (WHERE z.status = 'failed') AS failed
                    FROM mnemo.jobs AS z WHERE z.tenant_id = p_tenant_id AND z.status <> 'done'
                    GROUP BY z.kind) AS k), '{}'))
            FROM mnemo.jobs AS j WHERE j.tenant_id = p_tenant_id)
    );
END;
$$;

COMMENT ON FUNCTION mnemo.memory_stats(text, uuid) IS
'Counts and sizes of a tenant''s (or session''s) memories, messages, contexts and jobs.';
