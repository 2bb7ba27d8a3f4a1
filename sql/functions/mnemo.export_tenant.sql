-- mnemo.export_tenant(p_tenant_id) -> setof jsonb
-- A tenant's ground truth as JSON lines, in the order `mnemo import` reads them back:
--   {"type": "tenant", "format": "mnemosyne.export", "version": 1, tenant_id,
--    display_name, config}
--   {"type": "session", session_id, agent_id, channel, model, context_window,
--    response_reserve, system_prompt, config, parent_session_id, metadata, started_at}
--     (parents before children)
--   {"type": "message", session_id, message (OpenAI shape; a large tool output in
--    full, from its artifact), sensitivity, tags, metadata, created_at}
--     (per session, in turn order; compaction summaries are derived and left out)
--   {"type": "memory", kind, content, session_id, options} for the memories stored
--     through remember / correct that are current, with the options remember takes
--     (scope, confidence, tags, sensitivity, pinned, provenance_type, fact,
--     rationale, alternatives, due_at).
-- What the jobs and sweeps derive from these (extracted memories, summaries,
-- embeddings, segments) is not exported: an import derives it again.
-- Raises MN002 (unknown tenant), MN008. Reads only.
CREATE OR REPLACE FUNCTION mnemo.export_tenant(p_tenant_id text)
RETURNS SETOF jsonb
LANGUAGE plpgsql
STABLE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    RETURN QUERY
    SELECT jsonb_build_object('type', 'tenant', 'format', 'mnemosyne.export', 'version', 1,
        'tenant_id', t.tenant_id, 'display_name', t.display_name, 'config', t.config)
    FROM mnemo.tenants AS t WHERE t.tenant_id = p_tenant_id;

    RETURN QUERY
    WITH RECURSIVE tree AS (
        SELECT s.session_id, 0 AS depth FROM mnemo.sessions AS s
        WHERE s.tenant_id = p_tenant_id AND s.parent_session_id IS NULL
        UNION ALL
        SELECT s.session_id, tree.depth + 1 FROM mnemo.sessions AS s
        JOIN tree ON s.parent_session_id = tree.session_id
        WHERE s.tenant_id = p_tenant_id
    )
    SELECT jsonb_build_object('type', 'session', 'session_id', s.session_id, 'agent_id', s.agent_id,
        'channel', s.channel, 'model', s.model, 'context_window', s.context_window,
        'response_reserve', s.response_reserve, 'system_prompt', sp.content, 'config', s.config,
        'parent_session_id', s.parent_session_id, 'metadata', s.metadata, 'started_at', s.started_at)
    FROM mnemo.sessions AS s
    JOIN tree ON tree.session_id = s.session_id
    LEFT JOIN mnemo.system_prompts AS sp
        ON sp.tenant_id = s.tenant_id AND sp.prompt_hash = s.system_prompt_hash
    WHERE s.tenant_id = p_tenant_id
    ORDER BY tree.depth, s.created_at, s.session_id;

    RETURN QUERY
    SELECT jsonb_build_object('type', 'message', 'session_id', m.session_id,
        'message', jsonb_strip_nulls(jsonb_build_object('role', m.role,
            'content', CASE WHEN a.bytes IS NOT NULL THEN to_jsonb(convert_from(a.bytes, 'UTF8'))
                ELSE coalesce(m.content_parts, to_jsonb(m.content)) END,
            'name', m.name, 'tool_calls', m.tool_calls, 'tool_call_id', m.tool_call_id))
            || CASE WHEN m.content IS NULL AND m.content_parts IS NULL THEN '{"content": null}'::jsonb
                ELSE '{}' END,
        'sensitivity', m.sensitivity, 'tags', to_jsonb(m.tags), 'metadata', m.metadata,
        'created_at', m.created_at)
    FROM mnemo.messages AS m
    JOIN mnemo.sessions AS s ON s.tenant_id = m.tenant_id AND s.session_id = m.session_id
    LEFT JOIN mnemo.artifacts AS a ON a.tenant_id = m.tenant_id AND a.artifact_id = m.artifact_id
    WHERE m.tenant_id = p_tenant_id AND m.turn_index >= 0
    ORDER BY s.created_at, s.session_id, m.turn_index;

    RETURN QUERY
    SELECT jsonb_build_object('type', 'memory', 'kind', m.kind, 'content', m.content_full,
        'session_id', m.session_id, 'options', jsonb_strip_nulls(jsonb_build_object(
            'scope', m.scope, 'confidence', m.confidence, 'tags', to_jsonb(m.tags),
            'sensitivity', m.sensitivity, 'pinned', m.is_pinned, 'provenance_type', m.provenance_type,
            'fact', CASE WHEN f.memory_id IS NOT NULL THEN jsonb_build_object(
                'subject', f.subject, 'predicate', f.predicate, 'object', f.object) END,
            'rationale', CASE WHEN d.memory_id IS NOT NULL THEN to_jsonb(d.rationale) END,
            'alternatives', CASE WHEN d.memory_id IS NOT NULL THEN to_jsonb(d.alternatives) END,
            'due_at', k.due_at)))
    FROM mnemo.memories AS m
    LEFT JOIN mnemo.memory_facts AS f ON f.tenant_id = m.tenant_id AND f.memory_id = m.memory_id
    LEFT JOIN mnemo.memory_decisions AS d ON d.tenant_id = m.tenant_id AND d.memory_id = m.memory_id
    LEFT JOIN mnemo.memory_tasks AS k ON k.tenant_id = m.tenant_id AND k.memory_id = m.memory_id
    WHERE m.tenant_id = p_tenant_id AND m.is_active AND m.superseded_by IS NULL
        AND m.provenance ->> 'method' IN ('explicit', 'correction')
    ORDER BY m.memory_id;
END;
$$;

COMMENT ON FUNCTION mnemo.export_tenant(text) IS
'A tenant''s sessions, messages and explicit memories as JSON lines that mnemo import reads back.';
