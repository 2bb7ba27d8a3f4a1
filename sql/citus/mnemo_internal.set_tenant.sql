-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.set_tenant(p_tenant_id text) -> void, on Citus.
-- Replaces sql/functions/mnemo_internal.set_tenant.sql on a Citus coordinator. The
-- SET LOCAL reaches a worker only with the BEGIN of a remote transaction block
-- (citus.propagate_set_commands = local), and Citus opens one for a read-only query
-- only inside a client's transaction block: an API call the coordinator runs outside
-- one (a set-returning routine such as export_tenant, or a call that is not delegated:
-- nested in a query, an argument read from a table, a DO block) sent its reads without
-- the tenant, and row-level security on the worker showed them no row (export_tenant
-- exported the tenant line only; compile_context raised MN003 for a session it has).
-- A locking read of the tenant's shard makes Citus open the block inside any function
-- call (it finds no row and locks none); the tenant's other tables are co-located
-- with mnemo.sessions, so the call's later reads go over the same connection, in that
-- block. On a worker (a delegated call) the shard is local and this costs one lookup.
CREATE OR REPLACE FUNCTION mnemo_internal.set_tenant(p_tenant_id text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    EXECUTE format('SET LOCAL mnemo.tenant_id = %L', p_tenant_id);
    PERFORM FROM mnemo.sessions AS s
    WHERE s.tenant_id = p_tenant_id AND s.session_id IS NULL
    FOR KEY SHARE;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.set_tenant(text) IS
'Scopes row-level security to a tenant for the rest of the transaction (SET LOCAL mnemo.tenant_id), '
'on every node it reaches.';
