-- mnemo.record_message(p_tenant_id, p_session_id, p_message, ...) -> bigint
-- Appends one OpenAI chat message to a session's history and returns its message id:
-- mnemo.record_messages of that one message, which says what is checked, computed
-- and written.
--   p_message: {"role": system|developer|user|assistant|tool, "content": text or
--   content parts, "name", "tool_calls" (assistant), "tool_call_id" (tool)}.
--   p_metadata: free JSON; its keys model, finish_reason, prompt_tokens,
--   completion_tokens, latency_ms also fill the columns of the same names.
-- Bad input raises a MN0xx error (the same, word for word, as before record_messages
-- existed) and writes nothing.
-- Writes: what record_messages writes.
CREATE OR REPLACE FUNCTION mnemo.record_message(
    p_tenant_id text,
    p_session_id uuid,
    p_message jsonb,
    p_sensitivity text DEFAULT 'none',
    p_tags text[] DEFAULT '{}',
    p_created_at timestamptz DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}'
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- record_messages enters the tenant (mnemo_internal.enter_tenant) first.
    RETURN (mnemo.record_messages(p_tenant_id, p_session_id, ARRAY[p_message], p_sensitivity, p_tags,
        ARRAY[p_created_at], ARRAY[p_metadata]))[1];
END;
$$;

COMMENT ON FUNCTION mnemo.record_message(text, uuid, jsonb, text, text[], timestamptz, jsonb) IS
'Appends an OpenAI chat message to a session; returns its message id.';
