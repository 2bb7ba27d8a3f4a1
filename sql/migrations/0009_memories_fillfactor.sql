-- 0009: mnemo.memories' leaves leave 30 % of each page free (fillfactor 70; see
-- mnemo_internal.leaf_storage()), so that the access statistics' in-place updates stay
-- HOT (no new entry in the table's twelve indexes, the HNSW graph's included). New
-- leaves get the setting when they are created; this sets it on the existing ones. It
-- applies to pages filled from now on: full pages make room as their rows are updated
-- and vacuumed.
DO $$
DECLARE
    v_leaf regclass;
BEGIN
    FOR v_leaf IN
        SELECT t.relid FROM pg_partition_tree('mnemo.memories') AS t WHERE t.isleaf ORDER BY 1
    LOOP
        EXECUTE format('ALTER TABLE %s SET (fillfactor = 70)', v_leaf);
    END LOOP;
END
$$;
