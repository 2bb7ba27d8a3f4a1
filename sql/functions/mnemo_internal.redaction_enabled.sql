-- mnemo_internal.redaction_enabled(p_tenant_id) -> boolean
-- Whether secrets are redacted on this tenant's write path: the tenant's
-- config.redaction.enabled, else the 'redaction_enabled' setting (default true).
-- PL/pgSQL for the reason given in bound_tenant_id (compile_context calls it).
CREATE OR REPLACE FUNCTION mnemo_internal.redaction_enabled(p_tenant_id text)
RETURNS boolean
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN coalesce(
        (SELECT (t.config #>> '{redaction,enabled}')::boolean FROM mnemo.tenants AS t
            WHERE t.tenant_id = p_tenant_id),
        (mnemo_internal.setting('redaction_enabled') #>> '{}')::boolean,
        true);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.redaction_enabled(text) IS
'Whether the write path redacts secrets for this tenant (tenant config, then setting).';
