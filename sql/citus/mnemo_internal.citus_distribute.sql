-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- CALL mnemo_internal.citus_distribute()
-- Spreads the schema over the Citus cluster; run by every deploy on a coordinator,
-- after the migrations and routines, and idempotent (what is distributed stays so).
--   * mnemo.messages rebuilt with one partition level (citus_flatten_messages).
--   * Row-level security: Citus refuses policies with a subquery, so the tenant
--     policies test tenant_id = ANY (ARRAY[mnemo_internal.current_tenant_id()])
--     directly (the function is STABLE: evaluated per statement all the same). Not
--     tenant_id = current_tenant_id(): with a query's own tenant_id = $1 the planner
--     would derive the qual $1 = current_tenant_id(), which has no column, and Citus
--     refuses any outer join beside such a qual on PG15 ("pseudoconstant quals").
--     = ANY is no equality the planner derives from; the same rows.
--   * Every table with a NOT NULL tenant_id (but the tenants and the key and role
--     registries) is distributed by tenant_id, all co-located with mnemo.sessions: one
--     tenant's rows of every table sit on one worker, in co-located shards, so a
--     tenant's joins and foreign keys stay on that worker. Partitioned tables stay
--     partitioned (Citus distributes each partition alike).
--   * The other tables are reference tables, copied to every node: the tenants, the
--     role bindings and API keys (looked up before a tenant is known), settings,
--     error codes, the migration ledger, the helper LLM, the sweep ledgers.
--   * The API functions whose first argument is the tenant and that return one row are
--     distributed on it (mnemo_internal.citus_delegate: in schema mnemo_citus, behind
--     wrappers in mnemo that keep a NULL tenant from crashing a node; co-located with
--     mnemo.sessions): a call made outside
--     a transaction block is delegated whole to the worker that holds the tenant, its
--     PL/Python and its indexes local there. In a transaction block Citus runs the
--     function on the coordinator (there is no force_delegation), so the
--     transaction's settings, mnemo.api_key among them, are checked where they were
--     set, and each statement inside is routed to the tenant's worker.
--   * mnemo_internal.bound_tenant_id reads the role bindings from each node's
--     placement of their reference table (mnemo_internal.citus_local_bindings).
CREATE OR REPLACE PROCEDURE mnemo_internal.citus_distribute()
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_table regclass;
    v_fn regprocedure;
    v_pending regclass[];
    v_keys text[];
    v_drops text[];
    v_sql text;
    v_comment text;
    -- admin routines and those that write the reference tables run on the coordinator
    v_not_delegated text[] := ARRAY[
        'create_tenant', 'bind_role', 'create_api_key', 'list_api_keys', 'revoke_api_key',
        'run_sweep', 'retry_jobs'
    ];
BEGIN
    -- foreign keys to reference tables need one connection per node for the whole
    -- transaction (Citus refuses a parallel distribution before them otherwise)
    SET LOCAL citus.multi_shard_modify_mode = 'sequential';
    -- the line_tokens triggers (0012) are row-level BEFORE triggers that compute a column
    -- of the row itself: they run on the worker, in the shard, as on one server
    SET LOCAL citus.enable_unsafe_triggers = on;
    -- The API routines run as mnemo_api_owner (SECURITY DEFINER), and Citus reaches the
    -- other nodes as the current user: the role must log in there. Nobody else should:
    -- pg_hba.conf admits it from the nodes' addresses only, and its password (if the
    -- nodes ask one) is in pg_dist_authinfo (docs/operations.md, "On Citus").
    IF NOT (SELECT rolcanlogin FROM pg_roles WHERE rolname = 'mnemo_api_owner') THEN
        ALTER ROLE mnemo_api_owner LOGIN;
    END IF;
    -- The tenant an API call acts for (mnemo.tenant_id, SET LOCAL by enter_tenant) must
    -- reach the workers that run its statements' shard queries, where the shards'
    -- tenant policies read it: Citus forwards SET LOCAL in a transaction with this.
    PERFORM run_command_on_all_nodes(format(
        'ALTER DATABASE %I SET citus.propagate_set_commands = local', current_database()));
    -- A delegated call runs on the tenant's worker as a task, where Citus refuses any
    -- further query it plans as distributed (a generic plan's statement, the policies'
    -- read of the role bindings): every table such a call reads is a co-located shard
    -- of its tenant or a reference table, both on that worker, so the nested queries
    -- are local. Allowed for the database.
    PERFORM run_command_on_all_nodes(format(
        'ALTER DATABASE %I SET citus.allow_nested_distributed_execution = on', current_database()));
    -- Custom plans only: a generic plan (which PostgreSQL may pick for a prepared
    -- statement after 5 runs: PL/Python's and PL/pgSQL's saved plans) leaves the tenant
    -- a parameter, and Citus then fails to plan many of them ("could not create
    -- distributed plan"), on a worker running a delegated call too.
    PERFORM run_command_on_all_nodes(format(
        'ALTER DATABASE %I SET plan_cache_mode = force_custom_plan', current_database()));
    PERFORM mnemo_internal.citus_flatten_messages();

    FOR v_table IN
        SELECT p.polrelid::regclass FROM pg_policy AS p
        JOIN pg_class AS c ON c.oid = p.polrelid
        WHERE p.polname = 'tenant_isolation' AND NOT c.relispartition
            AND pg_get_expr(p.polqual, p.polrelid) NOT LIKE '%= ANY (ARRAY[mnemo_internal.current_tenant_id()])%'
    LOOP
        EXECUTE format('DROP POLICY tenant_isolation ON %s', v_table);
        EXECUTE format('CREATE POLICY tenant_isolation ON %s
            USING (tenant_id = ANY (ARRAY[mnemo_internal.current_tenant_id()]))
            WITH CHECK (tenant_id = ANY (ARRAY[mnemo_internal.current_tenant_id()]))', v_table);
    END LOOP;

    SELECT array_agg(c.oid::regclass ORDER BY c.oid) INTO v_pending
    FROM pg_class AS c
    WHERE c.relnamespace IN ('mnemo'::regnamespace, 'mnemo_internal'::regnamespace)
        AND c.relkind IN ('r', 'p') AND NOT c.relispartition
        AND NOT EXISTS (SELECT FROM pg_dist_partition AS d WHERE d.logicalrelid = c.oid);
    -- The foreign keys of the tables to distribute are dropped first and put back at
    -- the end: Citus refuses a reference table that local tables still reference (it
    -- would convert their whole foreign key graph), and Citus checks each kept key
    -- (distributed to reference, co-located distributed to distributed on tenant_id).
    SELECT coalesce(array_agg(format('ALTER TABLE %s ADD CONSTRAINT %I %s', f.conrelid::regclass, f.conname,
            pg_get_constraintdef(f.oid)) ORDER BY f.conrelid, f.conname), '{}'),
        coalesce(array_agg(format('ALTER TABLE %s DROP CONSTRAINT %I', f.conrelid::regclass, f.conname)), '{}')
    INTO v_keys, v_drops
    FROM pg_constraint AS f
    WHERE f.contype = 'f' AND f.conparentid = 0
        AND (f.conrelid = ANY (v_pending) OR f.confrelid = ANY (v_pending));
    FOREACH v_sql IN ARRAY v_drops LOOP
        EXECUTE v_sql;
    END LOOP;
    -- the reference tables first, then mnemo.sessions, with which the others are co-located
    FOR v_table IN
        SELECT t FROM unnest(v_pending) AS t
        ORDER BY mnemo_internal.citus_is_tenant_table(t), t <> 'mnemo.sessions'::regclass, t::text
    LOOP
        IF NOT mnemo_internal.citus_is_tenant_table(v_table) THEN
            PERFORM create_reference_table(v_table);
        ELSIF v_table = 'mnemo.sessions'::regclass THEN
            PERFORM create_distributed_table(v_table, 'tenant_id', colocate_with => 'none');
        ELSE
            PERFORM create_distributed_table(v_table, 'tenant_id', colocate_with => 'mnemo.sessions');
        END IF;
    END LOOP;
    FOREACH v_sql IN ARRAY v_keys LOOP
        EXECUTE v_sql;
    END LOOP;

    -- The API on its tenant, behind wrappers that keep a NULL tenant from crashing a
    -- node (mnemo_internal.citus_delegate). Not the set-returning routines: Citus
    -- delegates the inlined wrapper of one and then crashes deparsing it, so they are
    -- not distributed; they run on the coordinator, each statement routed to the
    -- tenant's worker. Those an earlier deploy distributed in mnemo are recreated plain.
    FOR v_fn IN
        SELECT o.objid::regprocedure FROM pg_dist_object AS o JOIN pg_proc AS p ON p.oid = o.objid
        WHERE o.classid = 'pg_proc'::regclass AND p.pronamespace = 'mnemo'::regnamespace
            AND o.distribution_argument_index IS NOT NULL AND p.proretset
    LOOP
        v_sql := pg_get_functiondef(v_fn);
        v_comment := obj_description(v_fn, 'pg_proc');
        EXECUTE format('DROP FUNCTION %s', v_fn);
        EXECUTE v_sql;
        EXECUTE format('COMMENT ON FUNCTION %s IS %L', v_fn, v_comment);
    END LOOP;
    CREATE SCHEMA IF NOT EXISTS mnemo_citus;
    COMMENT ON SCHEMA mnemo_citus IS
        'Citus only: the API routines distributed on their tenant, called through the wrappers in mnemo.';
    FOR v_fn IN
        SELECT p.oid::regprocedure FROM pg_proc AS p
        WHERE p.pronamespace = 'mnemo'::regnamespace AND p.prokind = 'f' AND NOT p.proretset
            AND (p.proargnames)[1] = 'p_tenant_id' AND p.proargtypes[0] = 'text'::regtype
            AND p.proname <> ALL (v_not_delegated)
            AND p.prosqlbody IS NULL  -- not a wrapper already
    LOOP
        PERFORM mnemo_internal.citus_delegate(v_fn);
    END LOOP;
    -- The workers parse a delegated call (SELECT mnemo_citus.NAME(...)) as the caller,
    -- who needs USAGE there; on the coordinator the API role has none, so it cannot call
    -- a distributed routine with a NULL tenant of its own (the wrappers need no lookup).
    -- GRANT reaches every node; the REVOKE, with propagation off, the coordinator only.
    -- The routines' owner keeps its USAGE everywhere (no caller is a member of it, and
    -- citus_add_node grants EXECUTE on a new worker as it); a worker added later gets
    -- the API role's from scripts/citus.sh add-worker, or from the next deploy.
    GRANT USAGE ON SCHEMA mnemo_citus TO mnemo_app, mnemo_api_owner;
    PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
    REVOKE USAGE ON SCHEMA mnemo_citus FROM mnemo_app;
    PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
    -- The run_command_on_* functions send any SQL to the workers as the caller, where
    -- it could name a distributed routine with a NULL tenant: admins only. (Direct
    -- connections to the workers: pg_hba.conf admits the API roles from the nodes only.)
    FOR v_fn IN
        SELECT p.oid::regprocedure FROM pg_proc AS p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
            AND p.proname IN ('run_command_on_workers', 'run_command_on_all_nodes', 'run_command_on_coordinator',
                'run_command_on_shards', 'run_command_on_placements', 'run_command_on_colocated_placements',
                'master_run_on_worker')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', v_fn);
    END LOOP;
    -- the role bindings read from this node's placement, not through Citus's planner:
    -- every row-level security check reads them (mnemo_internal.citus_local_bindings)
    PERFORM mnemo_internal.citus_local_bindings();
    -- A compile on its tenant's worker reads the tenant's shards directly, with generic
    -- plans once its backend has compiled often (plpy/mnemo_db/compile/compiler.py,
    -- PlpyDatabase): plan_cache_mode is force_generic_plan while such a statement runs.
    -- The routines those statements call that read through Citus keep custom plans,
    -- whatever the caller's setting: a generic plan of theirs leaves the tenant a
    -- parameter ("could not create distributed plan").
    ALTER FUNCTION mnemo_internal.message_segment(text, bigint, bigint, integer, text[], bigint[], timestamptz[])
        SET plan_cache_mode = force_custom_plan;
    ALTER FUNCTION mnemo_internal.redaction_enabled(text) SET plan_cache_mode = force_custom_plan;
END;
$$;

COMMENT ON PROCEDURE mnemo_internal.citus_distribute () IS
'Citus only: tenant tables distributed by tenant_id (co-located), the rest reference tables, the API on its tenant.';
