-- mnemo_internal.set_tenant(p_tenant_id text) -> void
-- Sets mnemo.tenant_id, the tenant row-level security admits, for the rest of the
-- transaction (called by enter_tenant and create_tenant once they have checked it).
-- SET LOCAL in a function of its own, not set_config(): the same on one server, and
-- on Citus the statement Citus forwards to every node the transaction reaches
-- (citus.propagate_set_commands = local), whose shards apply the same policy; Citus
-- forwards a SET LOCAL run inside a function call, hence the nested call.
CREATE OR REPLACE FUNCTION mnemo_internal.set_tenant(p_tenant_id text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    EXECUTE format('SET LOCAL mnemo.tenant_id = %L', p_tenant_id);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.set_tenant(text) IS
'Scopes row-level security to a tenant for the rest of the transaction (SET LOCAL mnemo.tenant_id).';
