-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.set_tenant(p_tenant_id text) -> void, on Citus.
-- Replaces sql/functions/mnemo_internal.set_tenant.sql on a Citus coordinator: the
-- same SET LOCAL mnemo.tenant_id, which Citus records and sends to a worker with the
-- BEGIN of each remote transaction block (citus.propagate_set_commands = local), and to
-- the remote transactions open at the time. Two gaps of Citus 13.2 that this closes:
--   * Citus runs a read-only statement in a remote transaction block only in a client's
--     transaction block (IsTransactionBlock) or once the transaction is a coordinated
--     one: a call outside a transaction block that runs on the coordinator (a
--     set-returning API function such as export_tenant, a call made with a session's
--     API key) read each shard in the worker's autocommit, without the tenant, so its
--     policies admitted no row (export_tenant gave the tenant line alone);
--   * Citus forgets the SET LOCAL commands of a subtransaction when it ends, committed
--     or not, and PL/Python runs each statement in one: the compiler's enter_tenant
--     (plpy) set the tenant for the connections open then, but a worker reached later
--     in the transaction got a BEGIN without it ("unknown session", in a transaction
--     block).
-- So right after the SET LOCAL, a read of the tenant's shard of mnemo.sessions runs in
-- a subtransaction of its own (a block with an exception clause, where
-- IsTransactionBlock() holds): Citus opens the tenant's worker connection in a remote
-- transaction block that carries the SET LOCAL, and the transaction stays a coordinated
-- one. The tenant's later statements reuse that connection (Citus keeps one per
-- worker in a transaction), and it keeps the setting until the transaction ends.
-- Same admitted rows as on one server; on a worker (a delegated call) the read is local.
CREATE OR REPLACE FUNCTION mnemo_internal.set_tenant(p_tenant_id text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    EXECUTE format('SET LOCAL mnemo.tenant_id = %L', p_tenant_id);
    BEGIN
        PERFORM FROM mnemo.sessions AS s WHERE s.tenant_id = p_tenant_id LIMIT 1;
    EXCEPTION WHEN OTHERS THEN
        RAISE;  -- the clause only makes the block a subtransaction
    END;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.set_tenant(text) IS
'Scopes row-level security to a tenant for the rest of the transaction (SET LOCAL mnemo.tenant_id), '
'on every Citus node it reaches.';
