-- mnemo.handle_tool_call(p_tenant_id, p_session_id, p_tool_call) -> jsonb
-- Answers one phantom tool call as the model made it: p_tool_call is an OpenAI
-- tool_call object {"id", "type": "function", "function": {"name": memory_query |
-- memory_restore | memory_release, "arguments": "<JSON text>"}}; returns the message
-- that answers it, {"role": "tool", "tool_call_id": <id>, "content": <text>}, ready to
-- append to the conversation. A client or the proxy services the three tools with
-- this one call (see mnemo.memory_query, memory_restore, memory_release).
-- Raises MN001 (not a tool call, unknown tool, arguments not a JSON object or with an
-- unknown or mistyped field), MN010 (unknown id), MN002, MN003, MN008.
CREATE OR REPLACE FUNCTION mnemo.handle_tool_call(
    p_tenant_id text,
    p_session_id uuid,
    p_tool_call jsonb
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    PERFORM mnemo_internal.check_json_depth(p_tool_call, 'tool_call');
    RETURN mnemo_internal.call_python('handle', p_tenant_id, p_session_id, jsonb_build_object('tool_call', p_tool_call));
END;
$$;

COMMENT ON FUNCTION mnemo.handle_tool_call(text, uuid, jsonb) IS
'The role: tool message answering a phantom tool call (memory_query, memory_restore, memory_release).';
