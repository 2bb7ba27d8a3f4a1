-- mnemo_internal.record_access(p_tenant_id, p_session_id) -> integer
-- The job of this name that versions before the 'access' sweep queued per compile
-- (mnemo_internal.run_job): folds the tenant's not yet accounted context_log rows
-- into the memories' access statistics (mnemo.memory_access) as the sweep does
-- (mnemo_internal.sweep_access, the one implementation), all of them, the session's
-- included; a row is counted once. p_session_id is the old job's payload, no longer
-- needed. Returns the number of memories updated.
-- Writes: memory_access, context_log.
CREATE OR REPLACE FUNCTION mnemo_internal.record_access(p_tenant_id text, p_session_id uuid)
RETURNS integer
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
SELECT (mnemo_internal.sweep_access(now(), p_tenant_id, 2147483647, '{}') #>> '{counts,memories_updated}')::integer;
$$;

COMMENT ON FUNCTION mnemo_internal.record_access(text, uuid) IS
'Legacy job: folds a tenant''s unaccounted context_log rows into memory access statistics.';
