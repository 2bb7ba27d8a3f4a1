-- mnemo_internal.redacted(p_tenant_id, p_value) -> jsonb
-- The write path's one redaction step: when the tenant redacts
-- (mnemo_internal.redaction_enabled) and mnemo_internal.redact finds a secret in
-- p_value, {"value": p_value with every secret replaced, "kinds": [what was found]};
-- else NULL, and the caller stores its arguments as they are. Callers pack what they
-- store into one JSON value ({"c": content, "md": metadata, ...}) and take each part
-- back from "value". Touches: nothing (reads the tenant's config and the settings).
-- The jsonb[] overload does the same for each value of a batch (record_messages: one
-- per message) in one call: an array of the same length (NULL where nothing was found),
-- or NULL when the tenant does not redact.
CREATE OR REPLACE FUNCTION mnemo_internal.redacted(p_tenant_id text, p_value jsonb)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN (mnemo_internal.redacted(p_tenant_id, ARRAY[p_value]))[1];
END;
$$;

CREATE OR REPLACE FUNCTION mnemo_internal.redacted(p_tenant_id text, p_values jsonb[])
RETURNS jsonb[]
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF NOT mnemo_internal.redaction_enabled(p_tenant_id) THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY(
        SELECT CASE WHEN jsonb_array_length(r.red -> 'kinds') > 0 THEN r.red END
        FROM unnest(mnemo_internal.redact(p_values)) WITH ORDINALITY AS r (red, k) ORDER BY r.k);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.redacted(text, jsonb) IS
'A value with its secrets replaced and the kinds found, or NULL (redaction off, nothing found).';
COMMENT ON FUNCTION mnemo_internal.redacted(text, jsonb[]) IS
'mnemo_internal.redacted of each value, in one call (NULL: redaction off).';
