-- 0028: API keys (issue 40). A network surface (mnemo serve, MCP over HTTP) acts for
-- the tenant of the key a request presents, and for no other. Only the SHA-256 of a
-- key's secret is kept: the secret itself is shown once, by mnemo.create_api_key.
-- A secret is 'mnk_' || key_id || '_' || 64 hex characters (256 random bits), so a
-- hash cannot be reversed and a leaked table does not leak a usable key.
-- In mnemo_internal, not mnemo: applications (mnemo_app) do not read it, not even
-- their own tenant's hashes; the API routines do (mnemo_api_owner, under the same
-- tenant policy as every tenant table). Not partitioned: a tenant has a handful of
-- keys, and the lookup of a presented secret is by hash, before any tenant is known.
CREATE TABLE mnemo_internal.api_keys (
    key_id text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{12}$'),
    tenant_id text NOT NULL REFERENCES mnemo.tenants (tenant_id) ON DELETE CASCADE,
    label text CHECK (length(label) <= 200),
    key_hash bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    revoked_at timestamptz,
    last_used_at timestamptz
);
CREATE INDEX api_keys_tenant_idx ON mnemo_internal.api_keys (tenant_id, created_at);
COMMENT ON TABLE mnemo_internal.api_keys IS
'API keys: the tenant each key acts for, the SHA-256 of its secret, expiry, revocation, last use.';

ALTER TABLE mnemo_internal.api_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mnemo_internal.api_keys
USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()));
