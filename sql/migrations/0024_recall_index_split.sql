-- 0024: a tenant's recall index gets two HNSW indexes, one over its messages and one
-- over its memories, in place of one over both. Measured on a 100,000-message tenant
-- (bench-context's size sweep): of the 120 items nearest a question, 113 on average
-- were memories (short statements sit nearer a question than turns do), so the
-- compile's k nearest items held almost no turns, and a KNN filtered to turns on the
-- shared graph found 0.54 of the 10 nearest. Apart, with hnsw.ef_search 400, each
-- finds 0.997 of its 10 nearest in ~2 ms. The old indexes are dropped here; the next
-- sync builds the new ones (the segments sweep, every minute; until then the
-- compile's KNN reads the tenant's rows without an index: the same items, slower).
ALTER TABLE mnemo_internal.recall_tenants ADD COLUMN memory_hnsw_index name;

DO $$
DECLARE
    v_tenant mnemo_internal.recall_tenants;
BEGIN
    FOR v_tenant IN SELECT * FROM mnemo_internal.recall_tenants LOOP
        EXECUTE format('DROP INDEX IF EXISTS mnemo_internal.%I', v_tenant.hnsw_index);
    END LOOP;
END;
$$;

UPDATE mnemo_internal.recall_tenants AS r
SET
    hnsw_index = 'recall_index_msg_hnsw_' || substr(md5(r.tenant_id), 1, 16),
    memory_hnsw_index = 'recall_index_mem_hnsw_' || substr(md5(r.tenant_id), 1, 16);

ALTER TABLE mnemo_internal.recall_tenants ALTER COLUMN memory_hnsw_index SET NOT NULL;
COMMENT ON COLUMN mnemo_internal.recall_tenants.hnsw_index IS 'The HNSW index over the tenant''s messages.';
COMMENT ON COLUMN mnemo_internal.recall_tenants.memory_hnsw_index IS 'The HNSW index over the tenant''s memories.';
