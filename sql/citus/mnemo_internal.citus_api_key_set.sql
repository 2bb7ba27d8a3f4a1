-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.citus_api_key_set() -> boolean: whether the setting mnemo.api_key
-- holds a key, read while a call is planned.
-- An API wrapper (mnemo_internal.citus_delegate) asks it for its tenant argument.
-- Citus delegates a call (outside a transaction block) to the tenant's worker with the
-- call's text alone: the worker's session has none of the caller's settings, so there
-- enter_tenant saw no key and skipped its check; a key set for the whole session (SET,
-- not SET LOCAL) named any tenant. (A key set per transaction is in a transaction
-- block, where Citus does not delegate.) With a key set, the wrapper passes the tenant
-- as a call the planner keeps, not a constant: Citus does not delegate, the routine
-- runs on the coordinator and enter_tenant checks the key there, as on one server.
-- IMMUTABLE on purpose, although it reads a setting: the planner folds it while it
-- plans the call, before Citus decides whether to delegate, and a plan with a
-- parameter for the tenant is planned again at each execution (custom plans: the
-- database's plan_cache_mode on Citus). PL/pgSQL so that it is never inlined.
CREATE OR REPLACE FUNCTION mnemo_internal.citus_api_key_set()
RETURNS boolean
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN coalesce(current_setting('mnemo.api_key', true), '') <> '';
END;
$$;

COMMENT ON FUNCTION mnemo_internal.citus_api_key_set() IS
'Citus only: whether a call is planned with an API key set, so that its wrapper keeps it on the '
'coordinator, which checks the key.';
