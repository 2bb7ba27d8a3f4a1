-- mnemo_internal.sweep_partitions(p_now, p_tenant_id, p_batch_size, p_state) -> jsonb
-- Partition maintenance of mnemo.messages (docs/design.md §Lifecycle), one batch:
--   1. (first batch) the months from p_now's month on, message_partition_months_ahead
--      of them, exist in every hash partition (mnemo.create_message_partitions);
--   2. (next batches) month partitions that ended more than message_retention_months
--      before p_now's month are detached, but only when every row in them is compacted
--      or pruned (checked under an exclusive lock on the partition, so no row can
--      arrive in between); a detached partition moves to schema mnemo_archive and is
--      listed in mnemo_internal.archived_partitions. DEFAULT partitions stay. The
--      months are listed by mnemo_internal.message_months (its own version on Citus).
-- Idempotent. p_tenant_id is ignored (partitions hold every tenant). Called by
-- mnemo.run_sweep('partitions'). Touches: the catalog, archived_partitions.
CREATE OR REPLACE FUNCTION mnemo_internal.sweep_partitions(
    p_now timestamptz,
    p_tenant_id text,
    p_batch_size integer,
    p_state jsonb
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_created integer;
    v_cutoff date;
    v_part record;
    v_busy boolean;
    v_rows bigint;
    v_target text;
    v_suffix text;
    v_index name;
    v_n bigint;
    v_detached integer := 0;
    v_seen integer := 0;
    v_after text := coalesce(p_state ->> 'after', '');
BEGIN
    IF NOT coalesce((p_state ->> 'created')::boolean, false) THEN
        v_created := mnemo.create_message_partitions(p_now::date,
            (mnemo_internal.setting('message_partition_months_ahead') #>> '{}')::integer);
        RETURN jsonb_build_object('rows', v_created, 'done', false,
            'state', jsonb_build_object('created', true), 'counts', jsonb_build_object('created', v_created));
    END IF;
    v_cutoff := (date_trunc('month', p_now) - make_interval(
        months => (mnemo_internal.setting('message_retention_months') #>> '{}')::integer))::date;
    FOR v_part IN SELECT * FROM mnemo_internal.message_months(v_cutoff, v_after, p_batch_size)
    LOOP
        v_seen := v_seen + 1;
        v_after := v_part.name;
        SET LOCAL lock_timeout = '5s';
        EXECUTE format('LOCK TABLE mnemo.%I IN ACCESS EXCLUSIVE MODE', v_part.name);
        -- one aggregate: Citus refuses an EXISTS (SELECT FROM ...) over a distributed partition
        EXECUTE format('SELECT count(*) FILTER (WHERE NOT is_compacted AND NOT is_pruned) > 0, count(*)
            FROM mnemo.%I', v_part.name) INTO v_busy, v_rows;
        CONTINUE WHEN v_busy;
        EXECUTE format('ALTER TABLE mnemo.%I DETACH PARTITION mnemo.%I', v_part.parent, v_part.name);
        -- A partition of the same name archived earlier (the month was re-created): the
        -- table and its indexes get a suffix, so the names in mnemo_archive stay unique.
        v_target := v_part.name;
        IF to_regclass(format('mnemo_archive.%I', v_target)) IS NOT NULL THEN
            v_suffix := to_char(clock_timestamp(), 'YYMMDDHH24MISSUS');
            v_target := v_part.name || '_' || v_suffix;
            FOR v_index, v_n IN
                SELECT ci.relname, row_number() OVER (ORDER BY ci.relname)
                FROM pg_index AS x JOIN pg_class AS ci ON ci.oid = x.indexrelid
                WHERE x.indrelid = format('mnemo.%I', v_part.name)::regclass
            LOOP
                EXECUTE format('ALTER INDEX mnemo.%I RENAME TO %I', v_index, left(v_target, 55) || '_' || v_n);
            END LOOP;
            EXECUTE format('ALTER TABLE mnemo.%I RENAME TO %I', v_part.name, v_target);
        END IF;
        EXECUTE format('ALTER TABLE mnemo.%I SET SCHEMA mnemo_archive', v_target);
        INSERT INTO mnemo_internal.archived_partitions (partition_name, parent, range_from, range_to, row_count,
            detached_at)
        VALUES (v_target, 'mnemo.' || v_part.parent, v_part.range_from,
            (v_part.range_from + interval '1 month')::date, v_rows, p_now)
        ON CONFLICT (partition_name) DO NOTHING;
        v_detached := v_detached + 1;
    END LOOP;
    RETURN jsonb_build_object('rows', v_detached, 'done', v_seen < p_batch_size,
        'state', jsonb_build_object('created', true, 'after', v_after),
        'counts', jsonb_build_object('detached', v_detached, 'kept_active', v_seen - v_detached));
END;
$$;

COMMENT ON FUNCTION mnemo_internal.sweep_partitions(timestamptz, text, integer, jsonb) IS
'One batch of partition maintenance: months ahead created, fully compacted old months detached.';
