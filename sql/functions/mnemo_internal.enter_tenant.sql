-- mnemo_internal.enter_tenant(p_tenant_id) -> void
-- Called first by every API function: checks that the caller may act for the tenant
-- and that it exists, then sets mnemo.tenant_id for the rest of the transaction so
-- that row-level security admits the tenant's rows.
-- Raises MN001 (no tenant given), MN008 (role bound to another tenant), MN002 (unknown).
CREATE OR REPLACE FUNCTION mnemo_internal.enter_tenant(p_tenant_id text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_bound text;
BEGIN
    IF p_tenant_id IS NULL OR p_tenant_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'tenant_id is required';
    END IF;
    v_bound := mnemo_internal.bound_tenant_id();
    IF v_bound IS NOT NULL AND v_bound <> p_tenant_id THEN
        RAISE EXCEPTION USING ERRCODE = 'MN008',
            MESSAGE = format('a role bound to tenant %L may not act for tenant %L', v_bound, p_tenant_id),
            HINT = 'This role is bound to one tenant; connect as that tenant''s role.';
    END IF;
    PERFORM set_config('mnemo.tenant_id', p_tenant_id, true);
    IF NOT EXISTS (SELECT FROM mnemo.tenants AS t WHERE t.tenant_id = p_tenant_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN002',
            MESSAGE = format('unknown tenant %L', p_tenant_id),
            HINT = 'Create it first: SELECT mnemo.create_tenant(''...'');';
    END IF;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.enter_tenant(text) IS
'Checks access to and existence of a tenant, then scopes row-level security to it.';
