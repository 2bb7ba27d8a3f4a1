-- mnemo_internal.current_tenant_id() -> text
-- The tenant the current role acts for: the binding in mnemo_internal.role_tenants
-- of the current role, else of the login role (so that a bound login cannot shed
-- its binding with SET ROLE mnemo_app), else the transaction's mnemo.tenant_id
-- setting, which mnemo_internal.enter_tenant() sets for unbound service roles.
-- Used by every row-level security policy. Reads: mnemo_internal.role_tenants.
-- PL/pgSQL for the reason given in bound_tenant_id.
-- deploy: before the migrations (their policies name it)
CREATE OR REPLACE FUNCTION mnemo_internal.current_tenant_id()
RETURNS text
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN coalesce(mnemo_internal.bound_tenant_id(), nullif(current_setting('mnemo.tenant_id', true), ''));
END;
$$;

COMMENT ON FUNCTION mnemo_internal.current_tenant_id() IS
'Tenant the current role acts for (its binding, else the mnemo.tenant_id setting).';
