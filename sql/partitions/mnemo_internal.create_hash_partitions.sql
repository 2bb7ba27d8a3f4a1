-- mnemo_internal.create_hash_partitions(parent, modulus, subpartition_by, unlogged)
-- Creates the hash partitions <parent>_h0 .. <parent>_h<modulus-1> of a table
-- partitioned BY HASH (tenant_id). With p_subpartition_by (e.g. 'RANGE (created_at)')
-- each hash partition is itself partitioned and gets a DEFAULT partition, so a row
-- whose month has no partition yet is still stored (never lost), and is moved into
-- its month by mnemo.create_message_partitions(). Leaves get the storage parameters
-- of mnemo_internal.leaf_storage(). Existing partitions are kept.
-- Returns the number of partitions created. Touches: the catalog only.
CREATE OR REPLACE FUNCTION mnemo_internal.create_hash_partitions(
    p_parent regclass,
    p_modulus integer,
    p_subpartition_by text DEFAULT NULL,
    p_unlogged boolean DEFAULT false
) RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_schema text;
    v_table text;
    v_name text;
    v_created integer := 0;
    v_storage text := mnemo_internal.leaf_storage(p_parent);
BEGIN
    IF p_modulus IS NULL OR p_modulus < 1 OR p_modulus > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('hash partition count must be between 1 and 1024, got %s', p_modulus);
    END IF;
    SELECT n.nspname, c.relname INTO v_schema, v_table
    FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE c.oid = p_parent;

    FOR i IN 0 .. p_modulus - 1 LOOP
        v_name := format('%s_h%s', v_table, i);
        CONTINUE WHEN to_regclass(format('%I.%I', v_schema, v_name)) IS NOT NULL;
        EXECUTE format(
            'CREATE %s TABLE %I.%I PARTITION OF %s FOR VALUES WITH (MODULUS %s, REMAINDER %s) %s',
            CASE WHEN p_unlogged THEN 'UNLOGGED' ELSE '' END,
            v_schema, v_name, p_parent, p_modulus, i,
            CASE WHEN p_subpartition_by IS NOT NULL THEN 'PARTITION BY ' || p_subpartition_by
                ELSE v_storage END);
        IF p_subpartition_by IS NOT NULL THEN
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I DEFAULT %s',
                v_schema, v_name || '_default', v_schema, v_name, v_storage);
        END IF;
        v_created := v_created + 1;
    END LOOP;
    RETURN v_created;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.create_hash_partitions(regclass, integer, text, boolean) IS
'Creates the hash partitions of a tenant-partitioned table (idempotent).';
