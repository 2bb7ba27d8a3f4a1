-- 0010: context_log's JSON columns are compressed with lz4 instead of pglz. Every
-- compile_context writes one row whose items (~10 kB of JSON for a 4k budget)
-- PostgreSQL compresses inline; lz4 compresses ~5x faster for a slightly larger row
-- (measured, 2 x 1,200 inserts of a real row: 0.36 -> 0.29 ms each). Rows already
-- stored keep pglz; both read the same. Set on the partitioned table (for partitions
-- created later) and on each existing leaf (ALTER TABLE does not recurse for this).
DO $$
DECLARE
    v_rel regclass;
BEGIN
    FOR v_rel IN
        SELECT t.relid FROM pg_partition_tree('mnemo.context_log') AS t ORDER BY t.level, 1
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN sections SET COMPRESSION lz4, '
            'ALTER COLUMN items SET COMPRESSION lz4, ALTER COLUMN omissions SET COMPRESSION lz4, '
            'ALTER COLUMN provenance SET COMPRESSION lz4', v_rel);
    END LOOP;
END
$$;
