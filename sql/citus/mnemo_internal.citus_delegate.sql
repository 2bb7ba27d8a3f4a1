-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.citus_delegate(p_fn regprocedure) -> void
-- Makes an API function (mnemo.NAME, first argument p_tenant_id) run on its tenant's
-- worker without letting a NULL tenant crash a node. Citus 13.2 delegates
-- SELECT f(...) of a function distributed on its tenant by hashing the argument's
-- constant, and a NULL constant there segfaults the backend (FindShardInterval on a
-- NULL datum; citusdata/citus#7242), which restarts the whole node. So:
--   * the routine moves to schema mnemo_citus and is distributed there; API roles
--     have no USAGE on mnemo_citus on the coordinator, so they cannot name it;
--   * mnemo.NAME becomes a wrapper of the same signature, SQL with a parsed body
--     (no name lookup at call time), SECURITY INVOKER and without SET, so the
--     planner inlines it before Citus looks at the call: the caller's query becomes
--     SELECT mnemo_citus.NAME(coalesce(<tenant>, mnemo_internal.citus_no_tenant()), ...).
--     A tenant given folds to that constant and the call is delegated as before;
--     NULL leaves a STABLE call, not a constant, so Citus does not delegate and the
--     routine runs on the coordinator, raising the single server's error (MN001);
--   * so does a call planned with an API key set (mnemo_internal.citus_api_key_set,
--     folded while the call is planned): the tenant is then passed as
--     coalesce(mnemo_internal.citus_no_tenant(), <tenant>), a call the planner keeps,
--     and the routine runs on the coordinator, where enter_tenant checks the key (a
--     delegated call reaches the worker without the caller's settings).
-- The workers parse the delegated call as the caller: there the API roles have USAGE
-- on mnemo_citus (mnemo_internal.citus_distribute). Idempotent: a deploy loads the full
-- routine into mnemo.NAME again, and this replaces the previous one in mnemo_citus.
CREATE OR REPLACE FUNCTION mnemo_internal.citus_delegate(p_fn regprocedure)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_name name;
    v_types text;
    v_args text;
    v_result text;
    v_volatility text;
    v_call text;
    v_comment text;
BEGIN
    SELECT p.proname, oidvectortypes(p.proargtypes), pg_get_function_arguments(p.oid),
        pg_get_function_result(p.oid),
        CASE p.provolatile WHEN 'i' THEN 'IMMUTABLE' WHEN 's' THEN 'STABLE' ELSE 'VOLATILE' END,
        (SELECT string_agg(CASE WHEN a.n = 1 THEN format('CASE WHEN mnemo_internal.citus_api_key_set()'
                    ' THEN coalesce(mnemo_internal.citus_no_tenant(), %1$I)'
                    ' ELSE coalesce(%1$I, mnemo_internal.citus_no_tenant()) END', a.arg)
                ELSE quote_ident(a.arg) END, ', ' ORDER BY a.n)
            FROM unnest(p.proargnames) WITH ORDINALITY AS a (arg, n)),
        obj_description(p.oid, 'pg_proc')
    INTO v_name, v_types, v_args, v_result, v_volatility, v_call, v_comment
    FROM pg_proc AS p
    WHERE p.oid = p_fn AND p.pronamespace = 'mnemo'::regnamespace AND NOT p.proretset
        AND p.proargmodes IS NULL AND (p.proargnames)[1] = 'p_tenant_id';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'citus_delegate: % is not an API function of one row with p_tenant_id first', p_fn;
    END IF;
    IF to_regprocedure(format('mnemo_citus.%I(%s)', v_name, v_types)) IS NOT NULL THEN
        EXECUTE format('DROP FUNCTION mnemo_citus.%I(%s)', v_name, v_types);
    END IF;
    EXECUTE format('ALTER FUNCTION %s SET SCHEMA mnemo_citus', p_fn);
    PERFORM create_distributed_function(p_fn, 'p_tenant_id', colocate_with => 'mnemo.sessions');
    EXECUTE format('CREATE FUNCTION mnemo.%I(%s) RETURNS %s LANGUAGE sql %s RETURN mnemo_citus.%I(%s)',
        v_name, v_args, v_result, v_volatility, v_name, v_call);
    EXECUTE format('COMMENT ON FUNCTION mnemo.%I(%s) IS %L', v_name, v_types, v_comment);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.citus_delegate(regprocedure) IS
'Citus only: distributes an API function in mnemo_citus behind an inlined wrapper that keeps NULL tenants local.';
