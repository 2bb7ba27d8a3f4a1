-- mnemo_internal.sweeps() -> setof (sweep, python, schedule, max_seconds)
-- The lifecycle sweeps: the one list of them. mnemo.run_sweep runs only these, each
-- batch by mnemo_internal.sweep_py (python: a <sweep>_batch method of
-- plpy/mnemo_db/lifecycle/sweeps.py's Sweeps) or else mnemo_internal.sweep_<sweep>;
-- cron/jobs.sql schedules each as pg_cron job mnemo-<sweep> ('_' as '-') on
-- schedule, with run_sweep's p_max_seconds = max_seconds where it polls.
-- Touches: nothing.
CREATE OR REPLACE FUNCTION mnemo_internal.sweeps()
RETURNS TABLE (sweep text, python boolean, schedule text, max_seconds integer)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
VALUES
    -- Promotion session -> episodic -> semantic / procedural (docs/design.md §Lifecycle).
    ('promotion', true, '*/15 * * * *', 0),
    -- Session expiry, memory TTLs, demotion by activity (docs/design.md §Lifecycle).
    ('expiry', true, '7 * * * *', 0),
    -- Lower fidelities and declared losses for new memories.
    ('summaries', true, '*/5 * * * *', 0),
    -- History compaction of sessions past 2x their context window (docs/design.md §Lifecycle).
    ('compaction', true, '*/10 * * * *', 0),
    -- History partitions: months ahead created, fully compacted months past retention detached.
    ('partitions', false, '17 3 * * *', 0),
    -- Working memory (UNLOGGED) rebuilt from durable data after a crash or a change.
    ('working_memory', false, '* * * * *', 0),
    -- pg_cron's own run history and the sweep ledger grow without bound; keep a week.
    ('prune', false, '43 3 * * *', 0),
    -- Retrieval segments: a tenant's newer messages sealed for compile_context's scoring.
    ('segments', false, '* * * * *', 0),
    -- Access statistics of the memories that compile_context sent (from context_log),
    -- folded a few seconds after the compiles, not in one burst a minute (cron/jobs.sql).
    ('access', false, '* * * * *', 45),
    -- Digests: per entity and per topic, one dated memory listing the facts said across
    -- sessions (docs/design.md §Lifecycle), for tenants whose memories changed.
    ('digests', true, '*/10 * * * *', 0)
$$;

COMMENT ON FUNCTION mnemo_internal.sweeps() IS
'The lifecycle sweeps (the one list): name, Python or SQL batches, pg_cron schedule, polling seconds.';
