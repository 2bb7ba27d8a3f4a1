-- mnemo.compile_context_bundle(p_tenant_id, p_session_id, p_query, p_options) -> jsonb
-- The active context bundle (build_acb's, docs/design.md §Surfaces) for the next model call of a
-- session: {"messages": [...OpenAI chat messages...], "tools": [phantom tool
-- definitions memory_query / memory_restore / memory_release], "report": {context_id,
-- task_type, channel, budget, tokens per section, items (source id, fidelity, tokens,
-- score), omissions with reasons, provenance (retrievers, scoring weights),
-- timings_ms (milliseconds per phase)}}.
--   p_query: what to retrieve for (default: the session's last user message).
--   p_options: budget (tokens, overrides the window arithmetic), task_type
--     (continuation | knowledge | new_session | tool_heavy; default: classified),
--     channel (default: the session's), caps {memory, history, items}, as_of
--     (timestamp: the memories and history valid then), phantom_tools (default true),
--     tool_tokens (tokens of the caller's own tool definitions), log (default true).
-- B = context window - system prompt - response reserve - tool definitions, split
-- between memories and history by task type (docs/design.md §Budget); B is never exceeded.
-- See plpy/mnemo_db/compile/ for the algorithm. Writes one context_log row (the
-- 'access' sweep folds it into the memories' access statistics, off the hot path).
-- Raises MN001 (bad option), MN002 (unknown tenant), MN003 (unknown session), MN008.
CREATE OR REPLACE FUNCTION mnemo.compile_context_bundle(
    p_tenant_id text,
    p_session_id uuid,
    p_query text DEFAULT NULL,
    p_options jsonb DEFAULT '{}'
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN mnemo_internal.call_python('compile_bundle', p_tenant_id, p_session_id,
        jsonb_build_object('query', p_query, 'options', p_options));
END;
$$;

COMMENT ON FUNCTION mnemo.compile_context_bundle(text, uuid, text, jsonb) IS
'Context bundle for the next model call: messages, phantom tools and a report.';
