-- mnemo_internal.bound_tenant_id() -> text
-- The tenant the acting role is bound to (mnemo.bind_role), NULL for unbound roles.
-- The acting role is, in this order: current_user; the role set with SET ROLE (the
-- application's role inside the API routines, which run as mnemo_api_owner); the
-- login role, so that a bound login cannot shed its binding with SET ROLE mnemo_app.
-- Reads: mnemo_internal.role_tenants (its policy shows the same three roles' rows).
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
        WHERE r.role_name IN (current_user, current_setting('role'), session_user)
        ORDER BY array_position(ARRAY[current_user::text, current_setting('role'), session_user::text],
            r.role_name::text)
        LIMIT 1);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.bound_tenant_id() IS
'Tenant the acting role (current, SET ROLE, else login role) is bound to; NULL when unbound.';
