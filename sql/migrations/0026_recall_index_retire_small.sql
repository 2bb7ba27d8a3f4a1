-- 0026: a tenant indexed under the old threshold (5,000 sealed messages; 0025 raised it
-- to 25,000) and still below the threshold now loses its recall index, as a tenant of
-- its size on a new install never gets one. Measured with bench-context's size sweep
-- on tenants of 10,000 messages that kept theirs: compile p50 / p95 53.1 / 81.9 ms
-- with the index against 31.7 / 78.0 ms scoring the whole history (docs/performance.md).
-- Its rows and its three indexes go; the segments sweep indexes it again once it
-- passes the threshold.
DO $$
DECLARE
    v_min bigint := (SELECT (s.value #>> '{}')::bigint FROM mnemo_internal.settings AS s
        WHERE s.key = 'recall_index_min_messages');
    v_tenant mnemo_internal.recall_tenants;
BEGIN
    FOR v_tenant IN
        SELECT r.* FROM mnemo_internal.recall_tenants AS r
        WHERE (SELECT coalesce(sum(g.n_messages), 0) FROM mnemo.message_segments AS g
            WHERE g.tenant_id = r.tenant_id) < v_min
    LOOP
        EXECUTE format('DROP INDEX IF EXISTS mnemo_internal.%I, mnemo_internal.%I, mnemo_internal.%I',
            v_tenant.hnsw_index, v_tenant.memory_hnsw_index, v_tenant.gin_index);
        DELETE FROM mnemo_internal.recall_index AS x WHERE x.tenant_id = v_tenant.tenant_id;
        DELETE FROM mnemo_internal.recall_tenants AS x WHERE x.tenant_id = v_tenant.tenant_id;
    END LOOP;
END;
$$;
