-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.citus_local_bindings() -> void
-- Rewrites mnemo_internal.bound_tenant_id() to read the role bindings from this node's
-- placement of mnemo_internal.role_tenants (a reference table: one shard, copied to
-- every node), called by mnemo_internal.citus_distribute once the table is one.
-- Why: bound_tenant_id runs in every row-level security check (through
-- current_tenant_id: the policies on Citus call it without a subquery, so it runs at
-- planning, at each scan's start and for each row a policy filters), ~540 times in one
-- compile. Each of its reads of the reference table went through Citus's planner and
-- local execution (planned, deparsed for the shard, planned again): ~0.12 ms a call
-- on a worker against ~0.02 ms on one server, most of a compile's extra time on
-- Citus. Read from the placement it is a plain query, its plan kept by PL/pgSQL.
-- The same rows: Citus writes a reference table to every placement in one
-- transaction, and itself reads a reference table from the local placement. A node
-- without the placement (a worker added before the reference tables were copied to
-- it) reads the table through Citus, as before.
CREATE OR REPLACE FUNCTION mnemo_internal.citus_local_bindings()
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_shard text;
    v_comment text := obj_description('mnemo_internal.bound_tenant_id()'::regprocedure, 'pg_proc');
BEGIN
    SELECT format('mnemo_internal.%I', 'role_tenants_' || s.shardid) INTO STRICT v_shard
    FROM pg_dist_shard AS s WHERE s.logicalrelid = 'mnemo_internal.role_tenants'::regclass;
    -- the same query as sql/functions/mnemo_internal.bound_tenant_id.sql, on the placement
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION mnemo_internal.bound_tenant_id()
RETURNS text
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $b$
BEGIN
    IF to_regclass(%1$L) IS NULL THEN
        RETURN (SELECT r.tenant_id FROM mnemo_internal.role_tenants AS r
            WHERE r.role_name IN (current_user, current_setting('role'), session_user)
            ORDER BY array_position(ARRAY[current_user::text, current_setting('role'), session_user::text],
                r.role_name::text)
            LIMIT 1);
    END IF;
    RETURN (SELECT r.tenant_id FROM %1$s AS r
        WHERE r.role_name IN (current_user, current_setting('role'), session_user)
        ORDER BY array_position(ARRAY[current_user::text, current_setting('role'), session_user::text],
            r.role_name::text)
        LIMIT 1);
END;
$b$
$f$, v_shard);
    EXECUTE format('COMMENT ON FUNCTION mnemo_internal.bound_tenant_id() IS %L',
        v_comment || ' (Citus: read from this node''s placement of the reference table.)');
END;
$$;

COMMENT ON FUNCTION mnemo_internal.citus_local_bindings() IS
'Citus only: bound_tenant_id reads the role bindings from the node''s placement of the reference table.';
