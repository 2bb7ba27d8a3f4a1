-- mnemo.list_sessions(p_tenant_id, p_options) -> table
-- A tenant's sessions, newest activity first, with their size: messages recorded
-- (the compaction summaries, turn -1, not counted), their tokens, and the last
-- message's time. For `mnemo sessions` and for `mnemo import`, which resumes a
-- session after its recorded messages.
--   p_options: session_id (only that session), status (active | paused | closed |
--   expired), agent_id, limit (default 100, 1 to 10000).
-- Raises MN001 (bad option), MN002 (unknown tenant), MN008. Reads only.
CREATE OR REPLACE FUNCTION mnemo.list_sessions(
    p_tenant_id text,
    p_options jsonb DEFAULT '{}'
) RETURNS TABLE (
    session_id uuid,
    agent_id text,
    channel text,
    status text,
    model text,
    context_window integer,
    messages bigint,
    tokens bigint,
    created_at timestamptz,
    last_message_at timestamptz
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_limit integer;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    PERFORM mnemo_internal.check_json_depth(p_options, 'options');
    PERFORM mnemo_internal.check_options(p_options, ARRAY['session_id', 'status', 'agent_id', 'limit']);
    IF coalesce(p_options ->> 'status', 'active') NOT IN ('active', 'paused', 'closed', 'expired') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('unknown session status %L', p_options ->> 'status'),
            HINT = 'status is one of active, paused, closed, expired';
    END IF;
    v_limit := mnemo_internal.option_limit(p_options, 100, 10000);
    RETURN QUERY
    SELECT s.session_id, s.agent_id, s.channel, s.status, s.model, s.context_window,
        coalesce(m.n, 0), coalesce(m.tokens, 0), s.created_at, m.last_at
    FROM mnemo.sessions AS s
    LEFT JOIN LATERAL (
        SELECT count(*) AS n, sum(x.token_count)::bigint AS tokens, max(x.created_at) AS last_at
        FROM mnemo.messages AS x
        WHERE x.tenant_id = s.tenant_id AND x.session_id = s.session_id AND x.turn_index >= 0
    ) AS m ON true
    WHERE s.tenant_id = p_tenant_id
        AND (NOT p_options ? 'session_id' OR s.session_id = (p_options ->> 'session_id')::uuid)
        AND (NOT p_options ? 'status' OR s.status = p_options ->> 'status')
        AND (NOT p_options ? 'agent_id' OR s.agent_id = p_options ->> 'agent_id')
    ORDER BY greatest(s.updated_at, m.last_at) DESC, s.session_id
    LIMIT v_limit;
EXCEPTION
    WHEN invalid_text_representation THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'malformed option value: ' || SQLERRM;
END;
$$;

COMMENT ON FUNCTION mnemo.list_sessions(text, jsonb) IS
'A tenant''s sessions with their message counts and tokens, newest activity first.';
