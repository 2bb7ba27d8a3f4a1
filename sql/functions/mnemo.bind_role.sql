-- mnemo.bind_role(p_role, p_tenant_id) -> void
-- Binds a database role to one tenant: from then on the role sees and writes only
-- that tenant's rows, whatever it passes as tenant_id. Admin only (not granted to
-- mnemo_app). The role also needs mnemo_app membership to call the API. The project's
-- own roles cannot be bound: a binding of mnemo_api_owner, the role the API runs as,
-- would override every caller's (see bound_tenant_id).
-- Raises MN001 (no such role, or a project role), MN002 (unknown tenant).
-- Writes: role_tenants.
CREATE OR REPLACE FUNCTION mnemo.bind_role(p_role name, p_tenant_id text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_role IS NULL OR NOT EXISTS (SELECT FROM pg_roles WHERE rolname = p_role) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('no such role %L', p_role);
    END IF;
    IF p_role IN ('mnemo_app', 'mnemo_api_owner') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('role %L cannot be bound to a tenant', p_role),
            HINT = 'Bind a role that is a member of mnemo_app.';
    END IF;
    IF NOT EXISTS (SELECT FROM mnemo.tenants AS t WHERE t.tenant_id = p_tenant_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN002', MESSAGE = format('unknown tenant %L', p_tenant_id);
    END IF;
    INSERT INTO mnemo_internal.role_tenants (role_name, tenant_id) VALUES (p_role, p_tenant_id)
    ON CONFLICT (role_name) DO UPDATE SET tenant_id = excluded.tenant_id;
END;
$$;

COMMENT ON FUNCTION mnemo.bind_role(name, text) IS 'Binds a database role to one tenant (admin).';
