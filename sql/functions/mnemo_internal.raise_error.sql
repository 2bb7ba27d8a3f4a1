-- mnemo_internal.raise_error(p_sqlstate, p_message, p_hint) -> void
-- Raises an error with a project SQLSTATE, message and optional hint. PL/Python code
-- calls it instead of plpy.error(), whose messages reach clients prefixed with
-- "plpy.Error: " and whose missing hint arrives as the text "None".
CREATE OR REPLACE FUNCTION mnemo_internal.raise_error(
    p_sqlstate text, p_message text, p_hint text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message;
    END IF;
    RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message, HINT = p_hint;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.raise_error(text, text, text) IS
'Raises an error with a project SQLSTATE (used by PL/Python code for clean messages).';
