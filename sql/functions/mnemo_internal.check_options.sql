-- mnemo_internal.check_options(p_options, p_keys) -> void
-- The options argument of a listing API function (list_sessions, search, list_jobs):
-- a JSON object whose keys are all in p_keys. Raises MN001 ('options must be a JSON
-- object', or 'unknown option' with the known ones as the hint).
CREATE OR REPLACE FUNCTION mnemo_internal.check_options(p_options jsonb, p_keys text[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_key text;
BEGIN
    IF p_options IS NULL OR jsonb_typeof(p_options) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options must be a JSON object';
    END IF;
    SELECT k INTO v_key FROM jsonb_object_keys(p_options) AS k WHERE k <> ALL(p_keys) LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown option %L', v_key),
            HINT = 'options: ' || array_to_string(p_keys, ', ');
    END IF;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.check_options(jsonb, text[]) IS
'Checks a listing function''s options: a JSON object of known keys only (MN001).';
