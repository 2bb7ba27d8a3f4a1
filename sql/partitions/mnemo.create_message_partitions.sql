-- mnemo.create_message_partitions(p_from, p_months)
-- Makes sure every hash partition of mnemo.messages has a monthly range partition
-- for each of the p_months months starting with the month of p_from. Rows that
-- already landed in a hash partition's DEFAULT partition for such a month are moved
-- into the new month partition in the same transaction (nothing is lost).
-- Month partitions get the storage parameters of mnemo_internal.leaf_storage().
-- Idempotent. Returns the number of month partitions created.
-- Touches: mnemo.messages partitions.
CREATE OR REPLACE FUNCTION mnemo.create_message_partitions(
    p_from date DEFAULT current_date,
    p_months integer DEFAULT 3
) RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_hash record;
    v_start date;
    v_end date;
    v_name text;
    v_moved bigint;
    v_created integer := 0;
    v_storage text := mnemo_internal.leaf_storage('mnemo.messages');
BEGIN
    IF p_from IS NULL OR p_months IS NULL OR p_months < 1 OR p_months > 120 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = 'create_message_partitions needs a start date and 1..120 months',
            HINT = 'e.g. SELECT mnemo.create_message_partitions(current_date, 3)';
    END IF;
    FOR v_hash IN
        SELECT c.relname
        FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'mnemo.messages'::regclass
        ORDER BY c.relname
    LOOP
        FOR m IN 0 .. p_months - 1 LOOP
            v_start := (date_trunc('month', p_from) + make_interval(months => m))::date;
            v_end := (v_start + interval '1 month')::date;
            v_name := format('%s_%s', v_hash.relname, to_char(v_start, 'YYYYMM'));
            CONTINUE WHEN to_regclass(format('mnemo.%I', v_name)) IS NOT NULL;
            -- Rows for this month in the default partition would block the new
            -- partition: park them in a temp table and put them back afterwards.
            EXECUTE format(
                'CREATE TEMP TABLE mnemo_moving ON COMMIT DROP AS
                 WITH d AS (DELETE FROM mnemo.%I WHERE created_at >= %L AND created_at < %L RETURNING *)
                 SELECT * FROM d', v_hash.relname || '_default', v_start, v_end);
            GET DIAGNOSTICS v_moved = ROW_COUNT;
            EXECUTE format('CREATE TABLE mnemo.%I PARTITION OF mnemo.%I FOR VALUES FROM (%L) TO (%L) %s',
                v_name, v_hash.relname, v_start, v_end, v_storage);
            IF v_moved > 0 THEN
                -- Generated columns (search_tsv) are recomputed, not copied.
                EXECUTE format('INSERT INTO mnemo.%1$I (%2$s) SELECT %2$s FROM mnemo_moving', v_name, (
                    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
                    FROM pg_attribute AS a
                    WHERE a.attrelid = 'mnemo.messages'::regclass AND a.attnum > 0
                        AND NOT a.attisdropped AND a.attgenerated = ''));
                RAISE NOTICE 'moved % rows from %_default into %', v_moved, v_hash.relname, v_name;
            END IF;
            DROP TABLE mnemo_moving;
            v_created := v_created + 1;
        END LOOP;
    END LOOP;
    RETURN v_created;
END;
$$;

COMMENT ON FUNCTION mnemo.create_message_partitions(date, integer) IS
'Creates the monthly partitions of mnemo.messages for p_months months from p_from (idempotent).';
