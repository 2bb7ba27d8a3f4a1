-- 0005: rows with embeddings stay inline up to a page (see
-- mnemo_internal.leaf_storage(): TOASTed embeddings doubled the cost of compile_context's
-- exact per-tenant vector scans). New leaf partitions get the setting when they are
-- created; this sets it on the existing ones. It applies to rows written from now on:
-- rows already stored keep their TOASTed embeddings until rewritten, which an admin
-- can do partition by partition when convenient (VACUUM FULL <partition>, which locks it).
DO $$
DECLARE
    v_leaf regclass;
BEGIN
    FOR v_leaf IN
        SELECT c.oid::regclass
        FROM pg_class AS c
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = 'mnemo' AND c.relkind = 'r' AND c.relispartition
            AND mnemo_internal.leaf_storage(c.oid) <> ''
        ORDER BY 1
    LOOP
        EXECUTE format('ALTER TABLE %s SET (toast_tuple_target = 8160)', v_leaf);
    END LOOP;
END
$$;
