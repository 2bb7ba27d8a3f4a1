-- mnemo_internal.setting(p_key) -> jsonb
-- A value from mnemo_internal.settings (defaults in sql/settings.sql).
-- Raises MN011 when the key is missing (a deploy did not run).
-- Runs as its caller: the API routines (as mnemo_api_owner) and the maintenance
-- routines may read the settings; applications may not (sql/grants.sql).
CREATE OR REPLACE FUNCTION mnemo_internal.setting(p_key text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_value jsonb;
BEGIN
    SELECT s.value INTO v_value FROM mnemo_internal.settings AS s WHERE s.key = p_key;
    IF v_value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN011', MESSAGE = format('setting %L is not defined', p_key),
            HINT = 'Re-run the deploy (make up).';
    END IF;
    RETURN v_value;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.setting(text) IS 'Value of a Mnemosyne setting.';
