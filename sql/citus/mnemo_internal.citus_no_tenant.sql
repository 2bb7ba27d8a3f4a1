-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.citus_no_tenant() -> text, always NULL.
-- What an API wrapper (mnemo_internal.citus_delegate) passes for a NULL tenant:
-- coalesce(p_tenant_id, mnemo_internal.citus_no_tenant()) folds to the tenant when
-- the call gives one, and to a call of this function when it gives NULL. STABLE, so
-- the planner keeps the call instead of folding it to a NULL constant: Citus delegates
-- a distributed function only when its distribution argument is a constant, and
-- Citus 13.2 crashes on a NULL constant there (docs/operations.md, "On Citus"). The
-- call then runs on the coordinator and the routine raises its own error (MN001).
-- PL/pgSQL, not SQL: the planner would inline a SQL body into that NULL constant.
CREATE OR REPLACE FUNCTION mnemo_internal.citus_no_tenant()
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.citus_no_tenant() IS
'Citus only: NULL, as a call the planner keeps, so that no NULL tenant reaches Citus''s delegation.';
