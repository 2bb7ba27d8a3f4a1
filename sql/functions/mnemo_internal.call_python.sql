-- mnemo_internal.call_python(p_entry, p_tenant_id, p_session_id, p_args) -> jsonb
-- The one boundary between the API's PL/pgSQL functions and the PL/Python code they
-- return from: the compiler (p_entry 'compile_messages' or 'compile_bundle', p_args
-- {"query", "options"}: mnemo_internal.compile_context; the one body of
-- mnemo.compile_context and mnemo.compile_context_bundle, which differ only in the
-- entry) and paging (any other entry: mnemo_internal.paging_call's operations). PL/Python prefixes an error that leaves
-- a Python function with its exception class ("plpy.SPIError: "); the handler here
-- hands every error to mnemo_internal.raise_project_error, which raises a project
-- error (class MN) again without the prefix, and re-raises anything else unchanged.
-- Every entry but 'metrics' needs a session. Raises MN001 (no session, compile options
-- nested too deep: mnemo_internal.check_json_depth), and what the entry raises.
CREATE OR REPLACE FUNCTION mnemo_internal.call_python(
    p_entry text,
    p_tenant_id text,
    p_session_id uuid,
    p_args jsonb
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_state text;
    v_message text;
    v_detail text;
    v_hint text;
BEGIN
    IF p_entry IN ('compile_messages', 'compile_bundle') THEN
        PERFORM mnemo_internal.check_json_depth(p_args -> 'options', 'options');
    END IF;
    IF p_session_id IS NULL AND p_entry <> 'metrics' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'session_id is required';
    END IF;
    IF p_entry IN ('compile_messages', 'compile_bundle') THEN
        RETURN mnemo_internal.compile_context(p_tenant_id, p_session_id, p_args ->> 'query',
            nullif(p_args -> 'options', 'null'), p_entry = 'compile_messages');
    END IF;
    RETURN mnemo_internal.paging_call(p_entry, p_tenant_id, p_session_id, p_args);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT,
        v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
    PERFORM mnemo_internal.raise_project_error(v_state, v_message, v_detail, v_hint);
    RAISE;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.call_python(text, text, uuid, jsonb) IS
'The API''s one call into PL/Python (compiler, paging): project errors without the class prefix.';
