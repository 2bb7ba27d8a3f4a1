-- mnemo.revoke_api_key(p_tenant_id, p_key_id) -> jsonb
-- Revokes one of the tenant's API keys: from the next request on, the key is refused
-- (mnemo_internal.api_key_tenant). Idempotent: a revoked key keeps its first
-- revocation time. Returns {key_id, revoked_at}.
-- Raises MN001 (no key id), MN002, MN008, MN010 (no such key for this tenant).
-- Writes: api_keys.revoked_at.
CREATE OR REPLACE FUNCTION mnemo.revoke_api_key(p_tenant_id text, p_key_id text)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_revoked timestamptz;
    v_now timestamptz;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    IF p_key_id IS NULL OR p_key_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'key_id is required';
    END IF;
    -- now() read first: Citus refuses a STABLE function inside the COALESCE of an UPDATE
    v_now := now();
    UPDATE mnemo_internal.api_keys AS k SET revoked_at = coalesce(k.revoked_at, v_now)
    WHERE k.tenant_id = p_tenant_id AND k.key_id = p_key_id
    RETURNING k.revoked_at INTO v_revoked;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'MN010',
            MESSAGE = format('no API key %L for tenant %L', p_key_id, p_tenant_id),
            HINT = 'mnemo keys list TENANT shows its keys.';
    END IF;
    RETURN jsonb_build_object('key_id', p_key_id, 'revoked_at', v_revoked);
END;
$$;

COMMENT ON FUNCTION mnemo.revoke_api_key(text, text) IS 'Revokes one of a tenant''s API keys.';
