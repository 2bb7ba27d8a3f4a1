-- mnemo.set_setting(p_key, p_value) -> jsonb
-- Changes a Mnemosyne setting (admin; see mnemo_internal.settings for the list).
-- Raises MN001 for an unknown key or a value of another JSON type than the default.
CREATE OR REPLACE FUNCTION mnemo.set_setting(p_key text, p_value jsonb)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_old jsonb;
BEGIN
    SELECT s.value INTO v_old FROM mnemo_internal.settings AS s WHERE s.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown setting %L', p_key),
            HINT = 'SELECT key, value, description FROM mnemo_internal.settings;';
    END IF;
    IF p_value IS NULL OR jsonb_typeof(p_value) <> jsonb_typeof(v_old) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('setting %L takes a JSON %s', p_key, jsonb_typeof(v_old));
    END IF;
    IF p_key = 'hash_partitions' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = 'hash_partitions is fixed when the schema is first deployed';
    END IF;
    UPDATE mnemo_internal.settings SET value = p_value, updated_at = now() WHERE key = p_key;
    RETURN v_old;
END;
$$;

COMMENT ON FUNCTION mnemo.set_setting(text, jsonb) IS 'Changes a setting; returns the old value (admin).';
