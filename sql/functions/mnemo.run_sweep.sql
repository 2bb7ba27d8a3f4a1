-- CALL mnemo.run_sweep(p_sweep, p_now, p_tenant_id, p_batch_size, p_max_batches, p_max_seconds)
-- Runs one lifecycle sweep (docs/design.md §Lifecycle), one of mnemo_internal.sweeps().
-- Every pg_cron job of the lifecycle is a CALL of this procedure (cron/jobs.sql); it
-- can also be called by hand, at top level (it commits), e.g.
-- CALL mnemo.run_sweep('compaction');
--   p_now: the sweep's clock (default now()), so tests and back-fills control time.
--   p_tenant_id: only this tenant's rows (default: all tenants).
--   p_max_seconds: once done, look again every 5 s until this many seconds from the
--   start (default 0: one pass). The 'access' job polls so (cron/jobs.sql): the
--   minute's compiles are folded a few seconds after they ran, in small batches,
--   not all in one burst when the minute starts, beside every other sweep's start.
--   p_now stays the run's clock.
-- Takes an advisory lock per sweep (a second run of the same sweep returns at once),
-- calls its batch function (mnemo_internal.sweep_py for the Python sweeps, else
-- mnemo_internal.sweep_<name>) batch after batch and COMMITs after each, so a
-- run that is killed keeps its finished batches and the next run goes on. Each run is
-- recorded in mnemo_internal.lifecycle_runs (see mnemo.lifecycle_status()); a failing
-- batch is rolled back, recorded with its SQLSTATE, and re-raised.
-- On Citus a run for all tenants takes them one at a time (mnemo.tenants in order; each
-- tenant's batches until done, then the next), passing each batch its tenant: every
-- statement of a batch then reads and writes one tenant's shards, which Citus sends
-- whole to the worker that holds them (multi-shard, they were refused: FOR UPDATE
-- across tenants, data-modifying CTEs over several shards), and each tenant's work is
-- done once a pass. 'partitions' and 'prune' hold no tenant's rows and run once.
-- No SET search_path here: a procedure with a SET clause cannot COMMIT, so every name
-- is schema-qualified instead. Raises MN001 for an unknown sweep or bad sizes.
CREATE OR REPLACE PROCEDURE mnemo.run_sweep(
    p_sweep text,
    p_now timestamptz DEFAULT now(),
    p_tenant_id text DEFAULT NULL,
    p_batch_size integer DEFAULT NULL,
    p_max_batches integer DEFAULT 100000,
    p_max_seconds integer DEFAULT 0
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_finished timestamptz;
    v_python boolean;
    v_batch integer;
    v_run bigint;
    v_state jsonb := '{}';
    v_result jsonb;
    v_counts jsonb := '{}';
    v_batches integer := 0;
    v_rows bigint := 0;
    v_error text;
    v_sqlstate text;
    v_poll constant interval := '5 seconds';
    v_until timestamptz := pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => p_max_seconds);
    v_each_tenant boolean;
    v_tenant text := p_tenant_id;
BEGIN
    SELECT s.python INTO v_python FROM mnemo_internal.sweeps() AS s WHERE s.sweep = p_sweep;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = pg_catalog.format('unknown sweep %L', p_sweep),
            HINT = 'one of ' || (SELECT pg_catalog.string_agg(s.sweep, ', ') FROM mnemo_internal.sweeps() AS s);
    END IF;
    v_batch := coalesce(p_batch_size, (mnemo_internal.setting('lifecycle_batch_size') #>> '{}')::integer);
    IF v_batch < 1 OR p_max_batches IS NULL OR p_max_batches < 1 OR p_now IS NULL
        OR p_max_seconds IS NULL OR p_max_seconds < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'run_sweep needs a clock and positive batch sizes';
    END IF;
    IF mnemo_internal.paused_cron_run() THEN
        RAISE NOTICE 'mnemo.run_sweep: the pg_cron job of % is paused; nothing to do', p_sweep;
        RETURN;
    END IF;
    IF NOT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext('mnemo.run_sweep'), pg_catalog.hashtext(p_sweep)) THEN
        RAISE NOTICE 'mnemo.run_sweep: % is already running; nothing to do', p_sweep;
        RETURN;
    END IF;
    -- We hold the lock: an earlier run still marked running died with its backend.
    -- (The clock is read into a variable: Citus refuses a VOLATILE function in an
    -- UPDATE of a distributed or reference table.)
    v_each_tenant := p_tenant_id IS NULL AND p_sweep NOT IN ('partitions', 'prune')
        AND EXISTS (SELECT FROM pg_catalog.pg_extension AS e WHERE e.extname = 'citus');
    IF v_each_tenant THEN
        SELECT pg_catalog.min(t.tenant_id) INTO v_tenant FROM mnemo.tenants AS t;
    END IF;
    v_finished := pg_catalog.clock_timestamp();
    UPDATE mnemo_internal.lifecycle_runs SET status = 'aborted', finished_at = v_finished
    WHERE sweep = p_sweep AND status = 'running';
    INSERT INTO mnemo_internal.lifecycle_runs (sweep, tenant_id, clock)
    VALUES (p_sweep, p_tenant_id, p_now) RETURNING run_id INTO v_run;
    COMMIT;
    LOOP
        PERFORM mnemo_internal.stop_if_postmaster_died();  -- an orphaned run must not block a restart
        EXIT WHEN v_each_tenant AND v_tenant IS NULL;  -- no tenant at all
        BEGIN
            IF v_python THEN
                v_result := mnemo_internal.sweep_py(p_sweep, p_now, v_tenant, v_batch, v_state);
            ELSE
                EXECUTE pg_catalog.format('SELECT mnemo_internal.%I($1, $2, $3, $4)', 'sweep_' || p_sweep)
                INTO v_result USING p_now, v_tenant, v_batch, v_state;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_error = MESSAGE_TEXT, v_sqlstate = RETURNED_SQLSTATE;
        END;
        EXIT WHEN v_error IS NOT NULL;
        v_batches := v_batches + 1;
        v_rows := v_rows + coalesce((v_result ->> 'rows')::bigint, 0);
        v_state := coalesce(v_result -> 'state', '{}');
        SELECT coalesce(pg_catalog.jsonb_object_agg(k.key, coalesce((v_counts ->> k.key)::numeric, 0)
            + coalesce((v_result -> 'counts' ->> k.key)::numeric, 0)), '{}')
        INTO v_counts
        FROM (SELECT pg_catalog.jsonb_object_keys(v_counts) AS key
            UNION SELECT pg_catalog.jsonb_object_keys(coalesce(v_result -> 'counts', '{}'))) AS k;
        UPDATE mnemo_internal.lifecycle_runs
        SET batches = v_batches, rows_touched = v_rows, counts = v_counts
        WHERE run_id = v_run;
        COMMIT;
        EXIT WHEN v_batches >= p_max_batches;
        IF coalesce((v_result ->> 'done')::boolean, true) THEN
            IF v_each_tenant THEN  -- the next tenant, else the pass is over
                v_state := '{}';
                SELECT pg_catalog.min(t.tenant_id) INTO v_tenant FROM mnemo.tenants AS t
                WHERE t.tenant_id > v_tenant;
                CONTINUE WHEN v_tenant IS NOT NULL;
                SELECT pg_catalog.min(t.tenant_id) INTO v_tenant FROM mnemo.tenants AS t;
            END IF;
            EXIT WHEN pg_catalog.clock_timestamp() + v_poll > v_until;
            PERFORM pg_catalog.pg_sleep_for(v_poll);
            v_state := '{}';  -- the next pass starts over
        END IF;
    END LOOP;
    v_finished := pg_catalog.clock_timestamp();
    UPDATE mnemo_internal.lifecycle_runs
    SET status = CASE WHEN v_error IS NULL THEN 'done' ELSE 'failed' END,
        finished_at = v_finished, error = v_error, sqlstate = v_sqlstate
    WHERE run_id = v_run;
    COMMIT;
    PERFORM pg_catalog.pg_advisory_unlock(pg_catalog.hashtext('mnemo.run_sweep'), pg_catalog.hashtext(p_sweep));
    IF v_error IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = v_sqlstate,
            MESSAGE = pg_catalog.format('sweep %s failed in batch %s: %s', p_sweep, v_batches + 1, v_error);
    END IF;
    RAISE NOTICE 'mnemo.run_sweep: % touched % rows in % batches %', p_sweep, v_rows, v_batches, v_counts;
END;
$$;

COMMENT ON PROCEDURE mnemo.run_sweep (text, timestamptz, text, integer, integer, integer) IS
'Runs a lifecycle sweep in committed batches under an advisory lock; recorded in lifecycle_runs.';
