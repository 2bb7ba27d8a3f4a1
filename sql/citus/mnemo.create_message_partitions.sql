-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo.create_message_partitions(p_from date, p_months integer) -> integer, on Citus.
-- Replaces sql/partitions/mnemo.create_message_partitions.sql on a Citus coordinator,
-- where mnemo.messages has the month level only (mnemo_internal.citus_flatten_messages):
-- Citus's create_time_partitions creates the months, distributed like their parent.
-- Rows of those months already in the DEFAULT partition are parked and put back, as
-- on one server (a new partition cannot be attached over them).
-- Same signature and errors as the single-server version; returns the months created.
CREATE OR REPLACE FUNCTION mnemo.create_message_partitions(
    p_from date DEFAULT current_date,
    p_months integer DEFAULT 3
) RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_before integer;
    -- timestamptz, not date: a date compared with created_at is a STABLE cast, which
    -- Citus refuses in a DELETE on a distributed table
    v_start timestamptz;
    v_end timestamptz;
    v_moved bigint;
    v_cols text;
    v_storage text;
    v_leaf regclass;
BEGIN
    IF p_from IS NULL OR p_months IS NULL OR p_months < 1 OR p_months > 120 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = 'create_message_partitions needs a start date and 1..120 months',
            HINT = 'e.g. SELECT mnemo.create_message_partitions(current_date, 3)';
    END IF;
    v_start := date_trunc('month', p_from)::date::timestamptz;
    v_end := (date_trunc('month', p_from) + make_interval(months => p_months))::date::timestamptz;
    SELECT count(*) INTO v_before FROM pg_inherits WHERE inhparent = 'mnemo.messages'::regclass;
    CREATE TEMP TABLE mnemo_moving ON COMMIT DROP AS
    WITH d AS (
        DELETE FROM mnemo.messages_default WHERE created_at >= v_start AND created_at < v_end RETURNING *
    ) SELECT * FROM d;
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    PERFORM create_time_partitions('mnemo.messages', INTERVAL '1 month', v_end, v_start);
    -- create_time_partitions gives the months no storage options: the leaves' own
    -- (mnemo_internal.leaf_storage, as on one server), which Citus passes to the shards
    v_storage := regexp_replace(mnemo_internal.leaf_storage('mnemo.messages'), '^WITH ', '');
    FOR v_leaf IN SELECT i.inhrelid::regclass FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'mnemo.messages'::regclass AND c.reloptions IS NULL AND v_storage <> '' LOOP
        EXECUTE format('ALTER TABLE %s SET %s', v_leaf, v_storage);
    END LOOP;
    IF v_moved > 0 THEN
        v_cols := (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FROM pg_attribute AS a
            WHERE a.attrelid = 'mnemo.messages'::regclass AND a.attnum > 0 AND NOT a.attisdropped
                AND a.attgenerated = '');
        EXECUTE format('INSERT INTO mnemo.messages (%1$s) SELECT %1$s FROM mnemo_moving', v_cols);
        RAISE NOTICE 'moved % rows from messages_default into their months', v_moved;
    END IF;
    DROP TABLE mnemo_moving;
    RETURN (SELECT count(*) FROM pg_inherits WHERE inhparent = 'mnemo.messages'::regclass) - v_before;
END;
$$;

COMMENT ON FUNCTION mnemo.create_message_partitions(date, integer) IS
'Creates the monthly partitions of mnemo.messages for p_months months from p_from (idempotent; Citus).';
