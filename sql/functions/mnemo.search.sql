-- mnemo.search(p_tenant_id, p_query, p_options) -> table
-- Hybrid search over a tenant's current memories and recorded messages, with the
-- scores that ranked them (for `mnemo search` and for a person checking what the
-- memory holds). Candidates come from both retrievers: the nearest embeddings to
-- the query's (cosine, HNSW) and the full-text matches of any of its words
-- (ts_rank_cd); each is then scored as compile_context fuses them:
--   score = 0.7 * cosine + 0.3 * lexical / max(lexical over the candidates).
-- Secret items never appear. Compaction summaries (turn -1) are skipped.
--   p_options: limit (default 10, 1 to 100), sources (["memories", "messages"], the
--   default both), session_id (only that session's messages and memories).
-- Returns source ('mem:<id>' or 'msg:<id>', as in compile_context's report), kind
-- (the memory's kind or the message's role), session_id, created_at, content, score,
-- cosine, lexical (the raw rank). Raises MN001 (empty query, bad option), MN002, MN008.
-- Reads only.
CREATE OR REPLACE FUNCTION mnemo.search(
    p_tenant_id text,
    p_query text,
    p_options jsonb DEFAULT '{}'
) RETURNS TABLE (
    source text,
    kind text,
    session_id uuid,
    created_at timestamptz,
    content text,
    score real,
    cosine real,
    lexical real
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_limit integer;
    v_pool integer;
    v_sources text[];
    v_session uuid;
    v_vec vector;
    v_tsq tsquery;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    PERFORM mnemo_internal.check_json_depth(p_options, 'options');
    IF p_query IS NULL OR btrim(p_query) = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'query is required';
    END IF;
    PERFORM mnemo_internal.check_options(p_options, ARRAY['limit', 'sources', 'session_id']);
    v_limit := mnemo_internal.option_limit(p_options, 10, 100);
    IF coalesce(jsonb_typeof(p_options -> 'sources'), 'array') <> 'array'
        OR EXISTS (SELECT FROM jsonb_array_elements(coalesce(p_options -> 'sources', '[]')) AS e
            WHERE e NOT IN ('"memories"', '"messages"')) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options.sources must be an array of "memories", "messages"';
    END IF;
    v_pool := greatest(50, 5 * v_limit);
    v_sources := CASE WHEN p_options ? 'sources'
        THEN ARRAY(SELECT jsonb_array_elements_text(p_options -> 'sources')) ELSE ARRAY['memories', 'messages'] END;
    v_session := (p_options ->> 'session_id')::uuid;
    v_vec := mnemo.embed(p_query);
    v_tsq := nullif(replace(plainto_tsquery('english', p_query)::text, '&', '|'), '')::tsquery;
    RETURN QUERY
    WITH mem_ids AS (
        (SELECT m.memory_id FROM mnemo.memories AS m
            WHERE 'memories' = ANY(v_sources) AND m.tenant_id = p_tenant_id AND m.is_active
                AND m.embedding IS NOT NULL
            ORDER BY m.embedding <=> v_vec LIMIT v_pool)
        UNION
        (SELECT m.memory_id FROM mnemo.memories AS m
            WHERE 'memories' = ANY(v_sources) AND m.tenant_id = p_tenant_id AND m.is_active
                AND m.search_tsv @@ v_tsq
            ORDER BY ts_rank_cd(m.search_tsv, v_tsq) DESC LIMIT v_pool)
    ),
    msg_ids AS (
        (SELECT x.message_id FROM mnemo.messages AS x
            WHERE 'messages' = ANY(v_sources) AND x.tenant_id = p_tenant_id AND x.embedding IS NOT NULL
            ORDER BY x.embedding <=> v_vec LIMIT v_pool)
        UNION
        (SELECT x.message_id FROM mnemo.messages AS x
            WHERE 'messages' = ANY(v_sources) AND x.tenant_id = p_tenant_id AND x.search_tsv @@ v_tsq
            ORDER BY ts_rank_cd(x.search_tsv, v_tsq) DESC LIMIT v_pool)
    ),
    candidates AS (
        SELECT 'mem:' || m.memory_id AS source, m.kind, m.session_id, m.created_at, m.content_full AS content,
            coalesce(1 - (m.embedding <=> v_vec), 0) AS cosine,
            coalesce(ts_rank_cd(m.search_tsv, v_tsq), 0) AS lexical
        FROM mnemo.memories AS m JOIN mem_ids AS i ON i.memory_id = m.memory_id
        WHERE m.tenant_id = p_tenant_id AND m.superseded_by IS NULL AND m.sensitivity <> 'secret'
            AND (v_session IS NULL OR m.session_id = v_session)
        UNION ALL
        SELECT 'msg:' || x.message_id, x.role, x.session_id, x.created_at,
            coalesce(x.content, x.tool_calls::text, x.content_parts::text),
            coalesce(1 - (x.embedding <=> v_vec), 0), coalesce(ts_rank_cd(x.search_tsv, v_tsq), 0)
        FROM mnemo.messages AS x JOIN msg_ids AS i ON i.message_id = x.message_id
        WHERE x.tenant_id = p_tenant_id AND x.turn_index >= 0 AND x.sensitivity <> 'secret'
            AND (v_session IS NULL OR x.session_id = v_session)
    ),
    scored AS (
        SELECT c.*, 0.7 * c.cosine + 0.3 * coalesce(c.lexical / nullif(max(c.lexical) OVER (), 0), 0) AS score
        FROM candidates AS c
    )
    SELECT s.source, s.kind, s.session_id, s.created_at, s.content,
        round(s.score::numeric, 4)::real, round(s.cosine::numeric, 4)::real, round(s.lexical::numeric, 4)::real
    FROM scored AS s
    ORDER BY s.score DESC, s.created_at DESC, s.source
    LIMIT v_limit;
EXCEPTION
    WHEN invalid_text_representation THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'malformed option value: ' || SQLERRM;
END;
$$;

COMMENT ON FUNCTION mnemo.search(text, text, jsonb) IS
'Hybrid search (embedding + full text) over a tenant''s memories and messages, with scores.';
