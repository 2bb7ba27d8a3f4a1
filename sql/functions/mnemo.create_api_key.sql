-- mnemo.create_api_key(p_tenant_id, p_label, p_expires_at) -> jsonb
-- A new API key for the tenant: {key_id, secret, tenant_id, label, created_at,
-- expires_at}. The secret ('mnk_<key_id>_<64 hex>', 256 random bits) is returned
-- this once: only its SHA-256 is stored. A request that presents it acts for this
-- tenant and no other (mnemo serve, MCP over HTTP; mnemo_internal.api_key_tenant).
-- p_expires_at: NULL for no expiry, else a time in the future.
-- Raises MN001 (label over 200 characters, expiry not in the future), MN002, MN008.
-- Writes: api_keys.
CREATE OR REPLACE FUNCTION mnemo.create_api_key(
    p_tenant_id text,
    p_label text DEFAULT NULL,
    p_expires_at timestamptz DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_id text := encode(gen_random_bytes(6), 'hex');
    v_secret text;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    IF length(p_label) > 200 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'label is longer than 200 characters';
    END IF;
    IF mnemo_internal.checked_timestamp(p_expires_at, 'expires_at') <= now() THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('expires_at %s is not in the future', p_expires_at);
    END IF;
    v_secret := 'mnk_' || v_id || '_' || encode(gen_random_bytes(32), 'hex');
    INSERT INTO mnemo_internal.api_keys (key_id, tenant_id, label, key_hash, expires_at)
    VALUES (v_id, p_tenant_id, p_label, sha256(convert_to(v_secret, 'UTF8')), p_expires_at);
    RETURN jsonb_build_object('key_id', v_id, 'secret', v_secret, 'tenant_id', p_tenant_id,
        'label', p_label, 'created_at', now(), 'expires_at', p_expires_at);
END;
$$;

COMMENT ON FUNCTION mnemo.create_api_key(text, text, timestamptz) IS
'Creates an API key for a tenant; returns its secret, which is shown only this once.';
