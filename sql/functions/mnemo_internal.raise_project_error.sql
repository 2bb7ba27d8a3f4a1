-- mnemo_internal.raise_project_error(p_sqlstate, p_message, p_detail, p_hint) -> void
-- The boundary between the API's PL/pgSQL functions and the PL/Python code they call
-- (compile_context, form_memory): PL/Python prefixes an error that leaves a Python
-- function with the exception class ("plpy.SPIError: ", "plpy.Error: "), so a
-- project error raised below it reached clients as "plpy.SPIError: unknown option".
-- Called from mnemo_internal.call_python's handler with the caught error's fields: a
-- project error (class MN) is raised again with the prefix removed, SQLSTATE, detail
-- and hint kept; anything else returns, and the handler re-raises it unchanged.
CREATE OR REPLACE FUNCTION mnemo_internal.raise_project_error(
    p_sqlstate text, p_message text, p_detail text, p_hint text
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_message text := regexp_replace(p_message, '^(plpy\.[A-Za-z]+: )+', '');
BEGIN
    IF p_sqlstate NOT LIKE 'MN%' THEN
        RETURN;
    END IF;
    -- (an empty DETAIL or HINT would still be sent, as an empty line)
    IF coalesce(p_detail, '') = '' AND coalesce(p_hint, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = v_message;
    ELSIF coalesce(p_hint, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = v_message, DETAIL = p_detail;
    ELSIF coalesce(p_detail, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = v_message, HINT = p_hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = v_message, DETAIL = p_detail, HINT = p_hint;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.raise_project_error(text, text, text, text) IS
'Re-raises a caught project error (class MN) without PL/Python''s class prefix.';
