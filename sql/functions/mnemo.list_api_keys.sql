-- mnemo.list_api_keys(p_tenant_id) -> table
-- The tenant's API keys, oldest first, with their state: active, revoked or expired.
-- Never a secret, nor its hash. Raises MN002, MN008. Reads only.
CREATE OR REPLACE FUNCTION mnemo.list_api_keys(p_tenant_id text)
RETURNS TABLE (
    key_id text,
    label text,
    state text,
    created_at timestamptz,
    expires_at timestamptz,
    revoked_at timestamptz,
    last_used_at timestamptz
)
LANGUAGE plpgsql
VOLATILE  -- enter_tenant checks the transaction's key, which may note its use
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    RETURN QUERY
    SELECT k.key_id, k.label,
        CASE WHEN k.revoked_at IS NOT NULL THEN 'revoked'
            WHEN k.expires_at <= now() THEN 'expired' ELSE 'active' END,
        k.created_at, k.expires_at, k.revoked_at, k.last_used_at
    FROM mnemo_internal.api_keys AS k
    WHERE k.tenant_id = p_tenant_id
    ORDER BY k.created_at, k.key_id;
END;
$$;

COMMENT ON FUNCTION mnemo.list_api_keys(text) IS 'A tenant''s API keys and their state (no secrets).';
