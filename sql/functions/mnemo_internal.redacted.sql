-- mnemo_internal.redacted(p_tenant_id, p_value) -> jsonb
-- The write path's one redaction step: when the tenant redacts
-- (mnemo_internal.redaction_enabled) and mnemo_internal.redact finds a secret in
-- p_value, {"value": p_value with every secret replaced, "kinds": [what was found]};
-- else NULL, and the caller stores its arguments as they are. Callers pack what they
-- store into one JSON value ({"c": content, "md": metadata, ...}) and take each part
-- back from "value". Touches: nothing (reads the tenant's config and the settings).
CREATE OR REPLACE FUNCTION mnemo_internal.redacted(p_tenant_id text, p_value jsonb)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_red jsonb;
BEGIN
    IF NOT mnemo_internal.redaction_enabled(p_tenant_id) THEN
        RETURN NULL;
    END IF;
    v_red := mnemo_internal.redact(p_value);
    IF jsonb_array_length(v_red -> 'kinds') > 0 THEN
        RETURN v_red;
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.redacted(text, jsonb) IS
'A value with its secrets replaced and the kinds found, or NULL (redaction off, nothing found).';
