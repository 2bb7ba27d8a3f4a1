-- 0003: lifecycle on pg_cron (issue 5): the compaction log, the memory archive, the
-- run ledger of the sweeps, the marker that tells a crash wiped working memory, and
-- the schema where history partitions past retention are parked once detached.

-- One row per history compaction (docs/design.md §Lifecycle): which span became which summary
-- message and summary memory, and the compaction ratio rho = removed / summary tokens.
CREATE TABLE mnemo.compaction_log (
    tenant_id text NOT NULL,
    compaction_id bigint GENERATED ALWAYS AS IDENTITY,
    session_id uuid NOT NULL,
    summary_message_id bigint NOT NULL,
    summary_memory_id bigint NOT NULL,
    first_turn integer NOT NULL,
    last_turn integer NOT NULL,
    messages_compacted integer NOT NULL CHECK (messages_compacted > 0),
    tokens_removed integer NOT NULL,
    summary_tokens integer NOT NULL,
    ratio real NOT NULL,
    active_tokens_before integer NOT NULL,
    active_tokens_after integer NOT NULL,
    method text NOT NULL DEFAULT 'extractive',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, compaction_id)
) PARTITION BY HASH (tenant_id);
CREATE INDEX compaction_log_session_idx ON mnemo.compaction_log (tenant_id, session_id, created_at);
COMMENT ON TABLE mnemo.compaction_log IS
'History compactions: span, summary message and memory, tokens removed, ratio (docs/design.md §Lifecycle).';

-- Expired memories: the row as it was when the expiry sweep deactivated it.
CREATE TABLE mnemo.memory_archive (
    tenant_id text NOT NULL,
    memory_id bigint NOT NULL,
    archived_at timestamptz NOT NULL,
    reason text NOT NULL,
    snapshot jsonb NOT NULL,
    PRIMARY KEY (tenant_id, memory_id, archived_at)
) PARTITION BY HASH (tenant_id);
COMMENT ON TABLE mnemo.memory_archive IS
'Snapshots of memories deactivated by the expiry sweep (cold storage).';

SELECT
    mnemo_internal.create_hash_partitions(
        t.tab::regclass,
        (
            SELECT value::integer FROM mnemo_internal.settings
            WHERE key = 'hash_partitions'
        ),
        NULL,
        false
    )
FROM unnest(ARRAY['mnemo.compaction_log', 'mnemo.memory_archive']) AS t (tab);

ALTER TABLE mnemo.compaction_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mnemo.compaction_log
USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()));
ALTER TABLE mnemo.memory_archive ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mnemo.memory_archive
USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()));

-- Every run of a sweep (mnemo.run_sweep): when, for which clock and tenant, how many
-- batches and rows, per-sweep counters, and the error if it failed. A run whose
-- backend died stays 'running' until the next run of the same sweep marks it
-- 'aborted'. Read through mnemo.lifecycle_status().
CREATE TABLE mnemo_internal.lifecycle_runs (
    run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sweep text NOT NULL,
    tenant_id text,
    clock timestamptz NOT NULL,
    pid integer NOT NULL DEFAULT pg_backend_pid(),
    status text NOT NULL DEFAULT 'running'
    CHECK (status IN ('running', 'done', 'failed', 'aborted')),
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    batches integer NOT NULL DEFAULT 0,
    rows_touched bigint NOT NULL DEFAULT 0,
    counts jsonb NOT NULL DEFAULT '{}',
    error text,
    sqlstate text
);
CREATE INDEX lifecycle_runs_sweep_idx ON mnemo_internal.lifecycle_runs (sweep, started_at DESC);
COMMENT ON TABLE mnemo_internal.lifecycle_runs IS 'Runs of the lifecycle sweeps (mnemo.run_sweep).';

-- Working memory (mnemo.working_memory, UNLOGGED) is derived from durable data. This
-- marker is UNLOGGED too: crash recovery empties both together, and the
-- working_memory sweep rebuilds every session that has no marker (or a stale one).
CREATE UNLOGGED TABLE mnemo_internal.working_memory_built (
    tenant_id text NOT NULL,
    session_id uuid NOT NULL,
    built_at timestamptz NOT NULL,
    items integer NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);
COMMENT ON TABLE mnemo_internal.working_memory_built IS
'Sessions whose working memory is built (UNLOGGED: empty after a crash, like the working memory).';

-- History partitions past retention, once everything in them is compacted or pruned,
-- are detached and moved here (nobody but the owner can read them).
CREATE SCHEMA mnemo_archive;
REVOKE ALL ON SCHEMA mnemo_archive FROM public;
CREATE TABLE mnemo_internal.archived_partitions (
    partition_name text PRIMARY KEY,
    parent text NOT NULL,
    range_from date NOT NULL,
    range_to date NOT NULL,
    row_count bigint NOT NULL,
    detached_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE mnemo_internal.archived_partitions IS
'History partitions detached by the partitions sweep and moved to schema mnemo_archive.';
