-- mnemo.memory_query(p_tenant_id, p_session_id, p_question, p_scope, p_max_tokens) -> jsonb
-- The memory_query phantom tool (docs/design.md §Phantom tools): answers a question from the full
-- content of the session's semantic objects, and from what the session may see beyond
-- them (the tenant's memories and its other sessions' messages, by the compile's
-- channel and recall-scope rules, through mnemo.search), without restoring any (a micro-fault
-- when the answer comes from objects below full fidelity: a fault_log row with the
-- answer's tokens and what a restore would have cost). With a helper LLM configured
-- (mnemo.set_helper_llm) it answers over the full content of the best objects;
-- without one, or when it fails, with their best lines within p_max_tokens.
--   p_scope: optional words to search with, or object ids (obj:N ...) to search in.
-- Returns {"answer", "sources": [obj:N ...], "tokens", "restore_tokens", "method"}.
-- Raises MN001 (empty question, max_tokens outside 16..2000), MN002, MN003, MN008.
-- Writes: fault_log (micro-faults).
CREATE OR REPLACE FUNCTION mnemo.memory_query(
    p_tenant_id text,
    p_session_id uuid,
    p_question text,
    p_scope text DEFAULT NULL,
    p_max_tokens integer DEFAULT 300
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    RETURN mnemo_internal.call_python('query', p_tenant_id, p_session_id, jsonb_build_object('question', p_question, 'scope', p_scope, 'max_tokens', p_max_tokens));
END;
$$;

COMMENT ON FUNCTION mnemo.memory_query(text, uuid, text, text, integer) IS
'Phantom tool memory_query: an answer from the session''s paged-out content, nothing restored.';
