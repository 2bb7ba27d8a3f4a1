-- mnemo_internal.leaf_storage(p_table) -> text
-- The storage clause for a new leaf partition of p_table: 'WITH (...)', or '' for the
-- defaults.
-- A table with an embedding column keeps rows of up to a page inline
-- (toast_tuple_target 8160, the maximum): with PostgreSQL's default of about 2 kB a
-- message or memory row of 384-float embedding plus text and tsvector goes over,
-- and its embedding (the largest column) is moved to the TOAST table, so every exact
-- per-tenant vector scan in compile_context would pay a TOAST lookup per row.
-- mnemo.memories' leaves leave 30 % of each page free (fillfactor 70), and
-- mnemo.memory_access's 20 %: an update that finds no room on its page is not HOT
-- (a new row version elsewhere, with an entry in each of the table's indexes).
-- The figures: docs/performance.md.
-- Touches: nothing (reads the catalog).
CREATE OR REPLACE FUNCTION mnemo_internal.leaf_storage(p_table regclass)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT coalesce('WITH (' || nullif(concat_ws(', ',
        CASE WHEN EXISTS (
            SELECT FROM pg_attribute AS a
            WHERE a.attrelid = p_table AND a.attnum > 0 AND NOT a.attisdropped
                AND a.atttypid = to_regtype('vector')
        ) THEN 'toast_tuple_target = 8160' END,
        CASE pg_partition_root(p_table)
            WHEN 'mnemo.memories'::regclass THEN 'fillfactor = 70'
            WHEN to_regclass('mnemo.memory_access') THEN 'fillfactor = 80'
        END
    ), '') || ')', '')
$$;

COMMENT ON FUNCTION mnemo_internal.leaf_storage(regclass) IS
'Storage clause for new leaf partitions of a table: rows with embeddings stay inline up to a page.';
