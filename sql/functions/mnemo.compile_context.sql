-- mnemo.compile_context(p_tenant_id, p_session_id, p_query, p_options) -> jsonb
-- The token-budgeted list of OpenAI chat messages for the next model call of a
-- session: system prompt, a memory block, the session summary when history was cut,
-- then the history. Pass it unchanged as `messages` to chat.completions.create.
-- Same arguments, options and errors as mnemo.compile_context_bundle, which also
-- returns the phantom tools and the report.
CREATE OR REPLACE FUNCTION mnemo.compile_context(
    p_tenant_id text,
    p_session_id uuid,
    p_query text DEFAULT NULL,
    p_options jsonb DEFAULT '{}'
) RETURNS jsonb
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT mnemo.compile_context_bundle(p_tenant_id, p_session_id, p_query, p_options) -> 'messages'
$$;

COMMENT ON FUNCTION mnemo.compile_context(text, uuid, text, jsonb) IS
'Token-budgeted OpenAI chat messages for the next model call of a session.';
