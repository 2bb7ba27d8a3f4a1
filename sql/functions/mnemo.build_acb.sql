-- mnemo.build_acb(p_tenant_id, p_session_id, p_query_text, p_max_tokens, p_channel,
--                 p_intent, p_agent_id, p_options) -> jsonb
-- build_acb (docs/design.md §Surfaces) over compile_context_bundle: the same compile, laid
-- out as an Active Context Bundle so that an MCP client gets ready-to-prompt
-- text blocks with their references:
--   {"acb_id": "acb_<context_id>", "budget_tokens", "token_used_est",
--    "sections": [
--      {"name": "rules", items: the system prompt},
--      {"name": "recent_window", items: the history messages, each with its msg: ref},
--      {"name": "session_summary", items: the summary of the cut history (when cut)},
--      {"name": "retrieved_evidence", items: memory-block entries, each with its
--       source ref, fidelity, tokens and score},
--      {"name": "relevant_decisions", items: the decisions among them}
--    ] (each with token_est; empty sections are left out),
--    "omissions", "provenance" (the compile's, with intent, agent_id, task_type,
--    channel and timings_ms), "messages" and "tools" (the compile's own, to send as
--    they are)}.
-- p_max_tokens is the compile's budget, p_channel its channel (default the
-- session's); p_intent becomes the task type when it names one (continuation,
-- knowledge, new_session, tool_heavy) and is kept in the provenance either way;
-- p_options are compile_context's other options. Errors as compile_context_bundle's:
-- MN001, MN002, MN003, MN008. Writes one context_log row (unless options.log false).
CREATE OR REPLACE FUNCTION mnemo.build_acb(
    p_tenant_id text,
    p_session_id uuid,
    p_query_text text DEFAULT NULL,
    p_max_tokens integer DEFAULT NULL,
    p_channel text DEFAULT NULL,
    p_intent text DEFAULT NULL,
    p_agent_id text DEFAULT NULL,
    p_options jsonb DEFAULT '{}'
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_options jsonb := p_options;
    v_bundle jsonb;
    v_report jsonb;
    v_messages jsonb;
    v_next integer := 0;
    v_sections jsonb := '[]';
    v_entries jsonb;
    v_history jsonb;
BEGIN
    IF v_options IS NULL OR jsonb_typeof(v_options) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options must be a JSON object';
    END IF;
    IF p_max_tokens IS NOT NULL THEN
        v_options := v_options || jsonb_build_object('budget', p_max_tokens);
    END IF;
    IF p_channel IS NOT NULL THEN
        v_options := v_options || jsonb_build_object('channel', p_channel);
    END IF;
    IF p_intent IN ('continuation', 'knowledge', 'new_session', 'tool_heavy') THEN
        v_options := v_options || jsonb_build_object('task_type', p_intent);
    END IF;
    v_bundle := mnemo.compile_context_bundle(p_tenant_id, p_session_id, p_query_text, v_options);
    v_report := v_bundle -> 'report';
    v_messages := v_bundle -> 'messages';

    -- The compile's messages come in a fixed order: system prompt, memory block,
    -- summary of the cut history, then the history; each is there when it has tokens.
    IF (v_report #>> '{tokens,system}')::integer > 0 THEN
        v_sections := v_sections || jsonb_build_array(jsonb_build_object('name', 'rules',
            'items', jsonb_build_array(jsonb_build_object('type', 'text', 'text', v_messages #>> '{0,content}',
                'refs', jsonb_build_array('session:' || p_session_id || ':system_prompt'))),
            'token_est', (v_report #> '{tokens,system}')));
        v_next := 1;
    END IF;
    IF (v_report #>> '{tokens,memory}')::integer > 0 THEN
        -- One entry per report item of the memory section, its text the block's lines
        -- from its label ("[mem:12 fact] ...") to the next label or day line.
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                'type', CASE WHEN i.item ->> 'kind' = 'decision' THEN 'decision' ELSE 'text' END,
                'text', coalesce(e.text, ''), 'refs', jsonb_build_array(i.item ->> 'source'),
                'kind', i.item -> 'kind', 'fidelity', i.item -> 'fidelity', 'tokens', i.item -> 'tokens',
                'score', i.item -> 'score')
                || CASE WHEN i.item ->> 'kind' = 'decision'
                    THEN jsonb_build_object('decision_id', i.item ->> 'source') ELSE '{}' END
                ORDER BY i.n), '[]')
        INTO v_entries
        FROM jsonb_array_elements(v_report -> 'items') WITH ORDINALITY AS i (item, n)
        LEFT JOIN LATERAL (
            SELECT rtrim(c.chunk, E'\n') AS text
            FROM regexp_split_to_table(v_messages #>> ARRAY[v_next::text, 'content'], E'\n(?=[\\[(])') AS c (chunk)
            WHERE c.chunk LIKE '[' || (i.item ->> 'source') || ' %'
                OR c.chunk LIKE '[' || (i.item ->> 'source') || ']%'
            LIMIT 1
        ) AS e ON true
        WHERE i.item ->> 'section' = 'memory';
        v_next := v_next + 1;
    END IF;
    IF (v_report #>> '{tokens,summary}')::integer > 0 THEN
        v_sections := v_sections || jsonb_build_array(jsonb_build_object('name', 'session_summary',
            'items', jsonb_build_array(jsonb_build_object('type', 'text', 'text', v_messages #>> ARRAY[v_next::text, 'content'],
                'refs', jsonb_build_array('session:' || p_session_id || ':summary'))),
            'token_est', v_report #> '{tokens,summary}'));
        v_next := v_next + 1;
    END IF;
    -- History messages and the report's history items are in the same order; a
    -- message whose item cannot be paired (never expected) keeps no ref.
    SELECT coalesce(jsonb_agg(jsonb_build_object('type', 'message', 'role', m.msg ->> 'role',
            'text', coalesce(m.msg ->> 'content', (m.msg -> 'tool_calls')::text, ''),
            'refs', CASE WHEN h.item IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(h.item ->> 'source') END,
            'fidelity', h.item -> 'fidelity', 'tokens', h.item -> 'tokens') ORDER BY m.n), '[]')
    INTO v_history
    FROM jsonb_array_elements(v_messages) WITH ORDINALITY AS m (msg, n)
    LEFT JOIN (
        SELECT x.item, row_number() OVER (ORDER BY x.n) AS k
        FROM jsonb_array_elements(v_report -> 'items') WITH ORDINALITY AS x (item, n)
        WHERE x.item ->> 'section' = 'history'
    ) AS h ON h.k = m.n - v_next
    WHERE m.n > v_next;
    IF jsonb_array_length(v_history) > 0 THEN
        v_sections := v_sections || jsonb_build_array(jsonb_build_object('name', 'recent_window',
            'items', v_history, 'token_est', v_report #> '{tokens,history}'));
    END IF;
    IF v_entries IS NOT NULL THEN
        v_sections := v_sections || (
            SELECT coalesce(jsonb_agg(jsonb_build_object('name', s.name,
                'items', (SELECT jsonb_agg(e.entry) FROM jsonb_array_elements(v_entries) AS e (entry)
                    WHERE (e.entry ->> 'type' = 'decision') = s.decisions),
                'token_est', (SELECT sum((e.entry ->> 'tokens')::integer) FROM jsonb_array_elements(v_entries) AS e (entry)
                    WHERE (e.entry ->> 'type' = 'decision') = s.decisions)) ORDER BY s.decisions), '[]')
            FROM (VALUES ('retrieved_evidence', false), ('relevant_decisions', true)) AS s (name, decisions)
            WHERE EXISTS (SELECT FROM jsonb_array_elements(v_entries) AS e (entry)
                WHERE (e.entry ->> 'type' = 'decision') = s.decisions));
    END IF;
    RETURN jsonb_build_object(
        'acb_id', 'acb_' || (v_report ->> 'context_id'),
        'budget_tokens', v_report #> '{budget,available}',
        'token_used_est', v_report #> '{tokens,total}',
        'sections', v_sections,
        'omissions', v_report -> 'omissions',
        'provenance', coalesce(v_report -> 'provenance', '{}') || jsonb_strip_nulls(jsonb_build_object(
            'intent', p_intent, 'agent_id', p_agent_id, 'task_type', v_report -> 'task_type',
            'channel', v_report -> 'channel', 'timings_ms', v_report -> 'timings_ms')),
        'messages', v_messages,
        'tools', v_bundle -> 'tools');
END;
$$;

COMMENT ON FUNCTION mnemo.build_acb(text, uuid, text, integer, text, text, text, jsonb) IS
'The Active Context Bundle: the compiled context in sections with references.';
