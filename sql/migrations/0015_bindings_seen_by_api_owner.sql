-- 0015: the API routines run as mnemo_api_owner (sql/grants.sql), so inside them
-- current_user is that role, not the application's. A role that acts through
-- SET ROLE (a pooler, or a superuser testing as it) is then neither current_user
-- nor session_user; it is still the value of the role setting, which only a member
-- of the role can set. mnemo_internal.bound_tenant_id() looks at all three, and the
-- policy lets it see the bindings of all three (and no other).
DROP POLICY own_binding ON mnemo_internal.role_tenants;
CREATE POLICY own_binding ON mnemo_internal.role_tenants
USING (role_name IN (current_user, session_user, current_setting('role')));
