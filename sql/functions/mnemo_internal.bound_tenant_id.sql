-- mnemo_internal.bound_tenant_id() -> text
-- The tenant the current role is bound to (mnemo.bind_role), or, failing that, the
-- tenant of the login role, so that a bound login cannot shed its binding with
-- SET ROLE mnemo_app. NULL for unbound roles. Reads: mnemo_internal.role_tenants.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined and is
-- planned again at every call (it runs in every row-level security check and every
-- enter_tenant); PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION mnemo_internal.bound_tenant_id()
RETURNS text
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN (SELECT r.tenant_id FROM mnemo_internal.role_tenants AS r
        WHERE r.role_name IN (current_user, session_user)
        ORDER BY r.role_name = current_user DESC
        LIMIT 1);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.bound_tenant_id() IS
'Tenant the current (else the login) role is bound to; NULL when unbound.';
