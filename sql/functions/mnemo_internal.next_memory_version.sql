-- mnemo_internal.next_memory_version(p_tenant_id, p_memory_id) -> integer
-- The number of a memory's next mnemo.memory_versions row: one past its last, 1 for
-- its first. The one place versions are numbered (formation's versions, the
-- promotion, expiry and demotion sweeps). Reads: memory_versions.
-- PL/pgSQL, not SQL: Citus plans no query on a distributed table from a SQL function's parameters
CREATE OR REPLACE FUNCTION mnemo_internal.next_memory_version(p_tenant_id text, p_memory_id bigint)
RETURNS integer
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN (SELECT coalesce(max(v.version), 0) + 1 FROM mnemo.memory_versions AS v
        WHERE v.tenant_id = p_tenant_id AND v.memory_id = p_memory_id);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.next_memory_version(text, bigint) IS
'The next version number of a memory (one past its last in memory_versions).';
