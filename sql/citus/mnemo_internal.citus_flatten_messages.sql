-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.citus_flatten_messages() -> boolean
-- Citus distributes a partitioned table whose partitions are plain tables, not one
-- whose partitions are partitioned again ("distributing multi-level partitioned tables
-- is not supported"). mnemo.messages is hash by tenant, then range by month: on Citus
-- the tenant level is the shards themselves (one tenant's rows on one worker, in one
-- shard per table), so the table is rebuilt with the month level only, PARTITION BY
-- RANGE (created_at) with a DEFAULT partition, the same columns, defaults, indexes,
-- triggers and comments; its rows (if any) are moved. Month partitions are then
-- created by Citus's create_time_partitions (sql/citus/mnemo.create_message_partitions.sql).
-- Returns whether it rebuilt the table (false: already single-level).
CREATE OR REPLACE FUNCTION mnemo_internal.citus_flatten_messages()
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_defs text[];
    v_def text;
    v_cols text;
    v_comment text;
BEGIN
    IF (SELECT partstrat FROM pg_partitioned_table WHERE partrelid = 'mnemo.messages'::regclass) <> 'h' THEN
        RETURN false;
    END IF;
    -- what to re-create on the new table: index and trigger definitions, by name
    SELECT array_agg(d ORDER BY o) INTO v_defs FROM (
        SELECT 1 AS o, format('ALTER TABLE mnemo.messages ADD CONSTRAINT %I %s', conname,
            pg_get_constraintdef(oid)) AS d
        FROM pg_constraint WHERE conrelid = 'mnemo.messages'::regclass AND contype IN ('p', 'u')
        UNION ALL
        -- ON, not ON ONLY (as pg_get_indexdef gives it for a partitioned table): the
        -- DEFAULT partition exists already and needs the index too
        SELECT 2, regexp_replace(pg_get_indexdef(i.indexrelid), ' ON ONLY ', ' ON ')
        FROM pg_index AS i
        WHERE i.indrelid = 'mnemo.messages'::regclass
            AND NOT EXISTS (SELECT FROM pg_constraint AS c WHERE c.conindid = i.indexrelid)
        UNION ALL
        SELECT 3, pg_get_triggerdef(oid)
        FROM pg_trigger WHERE tgrelid = 'mnemo.messages'::regclass AND NOT tgisinternal
    ) AS x;
    v_comment := obj_description('mnemo.messages'::regclass, 'pg_class');
    v_cols := (SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
        WHERE attrelid = 'mnemo.messages'::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = '');

    ALTER TABLE mnemo.messages RENAME TO messages_by_hash;
    -- the old indexes keep their names until the old table is dropped: free them
    FOR v_def IN SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
        WHERE i.indrelid = 'mnemo.messages_by_hash'::regclass LOOP
        EXECUTE format('ALTER INDEX mnemo.%I RENAME TO %I', v_def, left(v_def, 50) || '_by_hash');
    END LOOP;
    CREATE TABLE mnemo.messages (LIKE mnemo.messages_by_hash
        INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS INCLUDING STORAGE
        INCLUDING COMPRESSION INCLUDING COMMENTS) PARTITION BY RANGE (created_at);
    EXECUTE format('CREATE TABLE mnemo.messages_default PARTITION OF mnemo.messages DEFAULT %s',
        mnemo_internal.leaf_storage('mnemo.messages_by_hash'));
    FOREACH v_def IN ARRAY v_defs LOOP
        EXECUTE v_def;
    END LOOP;
    EXECUTE format('COMMENT ON TABLE mnemo.messages IS %L', v_comment);
    EXECUTE format('INSERT INTO mnemo.messages (%1$s) SELECT %1$s FROM mnemo.messages_by_hash', v_cols);
    DROP TABLE mnemo.messages_by_hash;
    ALTER TABLE mnemo.messages ENABLE ROW LEVEL SECURITY;
    CREATE POLICY tenant_isolation ON mnemo.messages
    USING (tenant_id = ANY (ARRAY[mnemo_internal.current_tenant_id()]))
    WITH CHECK (tenant_id = ANY (ARRAY[mnemo_internal.current_tenant_id()]));
    RETURN true;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.citus_flatten_messages() IS
'Citus only: rebuilds mnemo.messages as range-by-month partitions (Citus distributes one partition level).';
