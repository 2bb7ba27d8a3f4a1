-- mnemo.query_decisions(p_tenant_id, p_query, p_options) -> jsonb
-- A convenience of the MCP tools: the tenant's decisions with their rationale,
-- alternatives, constraints, consequences and references, best match first when a
-- query is given (full-text rank over an OR of its lexemes, plus trigram word
-- similarity), else newest first. Current decisions only unless
-- p_options.include_superseded; p_options.session_id limits to one session,
-- p_options.limit (default 20, at most 200) bounds the list.
-- Returns a JSON array of {memory_id, decision, status, rationale, alternatives,
-- constraints, consequences, refs, content, session_id, source_message_ids,
-- created_at, superseded_by, score}. Reads only.
CREATE OR REPLACE FUNCTION mnemo.query_decisions(
    p_tenant_id text,
    p_query text DEFAULT NULL,
    p_options jsonb DEFAULT '{}'
) RETURNS jsonb
LANGUAGE plpgsql
STABLE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_limit integer;
    v_tsq tsquery;
    v_out jsonb;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    IF p_options IS NULL OR jsonb_typeof(p_options) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options must be a JSON object';
    END IF;
    PERFORM mnemo_internal.check_json_depth(p_options, 'options');
    IF coalesce(jsonb_typeof(p_options -> 'limit'), 'number') <> 'number'
        OR coalesce((p_options ->> 'limit')::numeric, 20) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options.limit must be a number from 1 to 200';
    END IF;
    v_limit := coalesce((p_options ->> 'limit')::integer, 20);
    -- A query of stop words only has no lexemes: plainto_tsquery would say so in a
    -- NOTICE on every such call, and word similarity alone ranks it.
    IF to_tsvector('english', coalesce(p_query, '')) <> ''::tsvector THEN
        v_tsq := nullif(replace(plainto_tsquery('english', p_query)::text, '&', '|'), '')::tsquery;
    END IF;
    SELECT coalesce(jsonb_agg(r.j ORDER BY r.score DESC, r.created_at DESC, r.memory_id DESC), '[]')
    INTO v_out
    FROM (
        SELECT m.memory_id, m.created_at, s.score, jsonb_build_object(
            'memory_id', m.memory_id, 'decision', d.decision, 'status', d.status,
            'rationale', to_jsonb(d.rationale), 'alternatives', to_jsonb(d.alternatives),
            'constraints', to_jsonb(d.constraints), 'consequences', to_jsonb(d.consequences),
            'refs', to_jsonb(d.refs), 'content', m.content_full, 'session_id', m.session_id,
            'source_message_ids', to_jsonb(m.source_message_ids), 'created_at', m.created_at,
            'superseded_by', m.superseded_by, 'score', round(s.score::numeric, 4)) AS j
        FROM mnemo.memory_decisions AS d
        JOIN mnemo.memories AS m ON m.tenant_id = d.tenant_id AND m.memory_id = d.memory_id
        CROSS JOIN LATERAL (
            SELECT CASE WHEN p_query IS NULL OR btrim(p_query) = '' THEN 0
                ELSE coalesce(ts_rank_cd(m.search_tsv, v_tsq), 0) + word_similarity(p_query, m.content_full)
            END AS score
        ) AS s
        WHERE d.tenant_id = p_tenant_id AND m.sensitivity <> 'secret'
            AND (coalesce((p_options ->> 'include_superseded')::boolean, false)
                OR (m.superseded_by IS NULL AND m.is_active AND d.status = 'active'))
            AND (NOT p_options ? 'session_id' OR m.session_id = (p_options ->> 'session_id')::uuid)
            AND (v_tsq IS NULL OR m.search_tsv @@ v_tsq OR word_similarity(p_query, m.content_full) > 0.3)
        ORDER BY s.score DESC, m.created_at DESC, m.memory_id DESC
        LIMIT v_limit
    ) AS r;
    RETURN v_out;
EXCEPTION
    WHEN invalid_text_representation OR invalid_parameter_value THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'malformed option value: ' || SQLERRM;
END;
$$;

COMMENT ON FUNCTION mnemo.query_decisions(text, text, jsonb) IS
'Decisions with rationale and alternatives, best match for a query first.';
