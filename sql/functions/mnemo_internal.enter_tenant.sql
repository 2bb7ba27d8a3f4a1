-- mnemo_internal.enter_tenant(p_tenant_id) -> void
-- Called first by every API function: checks that the caller may act for the tenant
-- and that it exists, then sets mnemo.tenant_id for the rest of the transaction so
-- that row-level security admits the tenant's rows.
-- A network service sets mnemo.api_key, for the transaction, to the API key its
-- request presented (set_config('mnemo.api_key', key, true)): the tenant must then be
-- that key's, so a request routed to another tenant by a bug in the service is
-- refused here, before any row is read. The key is resolved once per API call, not
-- in the policies: forging the setting needs a valid secret, so it grants nothing.
-- Raises MN001 (no tenant given), MN008 (role bound to another tenant; the
-- transaction's key invalid, revoked, expired or another tenant's), MN002 (unknown).
CREATE OR REPLACE FUNCTION mnemo_internal.enter_tenant(p_tenant_id text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_bound text;
    v_key text := nullif(current_setting('mnemo.api_key', true), '');
    v_key_tenant text;
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
    IF v_key IS NOT NULL THEN
        v_key_tenant := mnemo_internal.api_key_tenant(v_key);
        IF v_key_tenant IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN008',
                MESSAGE = 'the API key of this transaction is unknown, revoked or expired',
                HINT = 'mnemo keys list TENANT shows a tenant''s keys; mnemo keys create makes one.';
        ELSIF v_key_tenant <> p_tenant_id THEN
            RAISE EXCEPTION USING ERRCODE = 'MN008',
                MESSAGE = format('an API key of tenant %L may not act for tenant %L', v_key_tenant, p_tenant_id),
                HINT = 'A key acts for its own tenant only.';
        END IF;
    END IF;
    PERFORM mnemo_internal.set_tenant(p_tenant_id);
    IF NOT EXISTS (SELECT FROM mnemo.tenants AS t WHERE t.tenant_id = p_tenant_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN002',
            MESSAGE = format('unknown tenant %L', p_tenant_id),
            HINT = format('Create it first: mnemo tenants --create %s (in SQL: SELECT mnemo.create_tenant(%L)).',
                p_tenant_id, p_tenant_id);
    END IF;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.enter_tenant(text) IS
'Checks access to and existence of a tenant, then scopes row-level security to it.';
