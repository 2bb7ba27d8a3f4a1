-- mnemo_internal.current_tenant_id() -> text
-- The tenant the current role acts for: its binding in mnemo_internal.role_tenants
-- if it has one (it cannot change it), else the transaction's mnemo.tenant_id
-- setting, which mnemo_internal.enter_tenant() sets for unbound service roles.
-- Used by every row-level security policy. Reads: mnemo_internal.role_tenants.
CREATE OR REPLACE FUNCTION mnemo_internal.current_tenant_id()
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT coalesce(
        (SELECT r.tenant_id FROM mnemo_internal.role_tenants AS r WHERE r.role_name = current_user),
        nullif(current_setting('mnemo.tenant_id', true), '')
    )
$$;

COMMENT ON FUNCTION mnemo_internal.current_tenant_id() IS
'Tenant the current role acts for (its binding, else the mnemo.tenant_id setting).';
