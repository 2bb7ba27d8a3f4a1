-- 0016: paging (issue 22; docs/design.md §Semantic objects and paging).
-- The context window as a managed cache: a session's history is segmented into
-- semantic objects (a tool call with its results, a stretch of conversation), each
-- with a per-session residency (its fidelity in the context now, and until which turn
-- it is pinned there). The objects refer to the messages and memories they are made
-- of: nothing is copied. Every residency change is a fidelity_log row, every fault a
-- fault_log row (both tables exist since 0001; nothing wrote them until now).
-- Fidelities are named, not numbered (docs/design.md §Fidelity ladder): full (L0), detail (L1), compact
-- (L2), stub (L3), evicted (L4).

CREATE SEQUENCE mnemo.semantic_objects_object_id_seq;
CREATE TABLE mnemo.semantic_objects (
    tenant_id text NOT NULL,
    object_id bigint NOT NULL DEFAULT nextval('mnemo.semantic_objects_object_id_seq'),
    session_id uuid NOT NULL,
    kind text NOT NULL CHECK (kind IN (
        'conversation_phase', 'design_decision', 'debugging_session', 'file_context',
        'tool_result', 'plan', 'error_context', 'external_reference'
    )),
    -- the messages it is made of, in turn order (an object of a memory has none)
    message_ids bigint[] NOT NULL DEFAULT '{}',
    memory_id bigint,
    first_turn integer NOT NULL,
    last_turn integer NOT NULL,
    -- what it reads: a file path or a URL, and the lines read (NULL: all of it)
    source_key text,
    source_lines int4range,
    -- a tool that wrote source_key (an edit): the reads before it are stale
    writes_source boolean NOT NULL DEFAULT false,
    -- digest of its tool outputs: a later identical output supersedes it (waste)
    output_hash bytea,
    label text NOT NULL DEFAULT '',
    -- what an assistant's cleanup tags said of it (summarize / collapse, declare_losses)
    summary text,
    losses text,
    token_count integer NOT NULL DEFAULT 0,
    -- a conversation phase grows while the conversation stays on its topic
    is_open boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, object_id),
    CHECK (first_turn <= last_turn)
) PARTITION BY HASH (tenant_id);
CREATE INDEX semantic_objects_session_idx ON mnemo.semantic_objects (tenant_id, session_id, first_turn);
CREATE INDEX semantic_objects_source_idx ON mnemo.semantic_objects (tenant_id, session_id, source_key)
WHERE source_key IS NOT NULL;
CREATE INDEX semantic_objects_output_idx ON mnemo.semantic_objects (tenant_id, session_id, output_hash)
WHERE output_hash IS NOT NULL;
CREATE INDEX semantic_objects_messages_idx ON mnemo.semantic_objects USING gin (message_ids);
COMMENT ON TABLE mnemo.semantic_objects IS
'Semantic objects of a session: tool calls with their results, conversation phases, plans.';

-- Per-session residency: changed only by the fidelity manager (plpy/mnemo_db/paging/).
CREATE TABLE mnemo.object_residency (
    tenant_id text NOT NULL,
    session_id uuid NOT NULL,
    object_id bigint NOT NULL,
    fidelity text NOT NULL DEFAULT 'full'
    CHECK (fidelity IN ('full', 'detail', 'compact', 'stub', 'evicted')),
    -- pinned at its fidelity while the session's turn count is below this (thrash guard)
    pinned_until_turn integer NOT NULL DEFAULT 0,
    -- the fidelity a goal shift may not demote it below, and the cleanup tag anchor
    anchored boolean NOT NULL DEFAULT false,
    changed_turn integer NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id, object_id),
    FOREIGN KEY (tenant_id, object_id) REFERENCES mnemo.semantic_objects ON DELETE CASCADE
) PARTITION BY HASH (tenant_id);
COMMENT ON TABLE mnemo.object_residency IS
'Fidelity of each semantic object in a session''s context now, and its pin.';

CREATE TABLE mnemo.object_links (
    tenant_id text NOT NULL,
    src_object_id bigint NOT NULL,
    relation text NOT NULL CHECK (relation IN ('parent_of', 'caused_by', 'references', 'supersedes', 'depends_on')),
    dst_object_id bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, src_object_id, relation, dst_object_id),
    FOREIGN KEY (tenant_id, src_object_id) REFERENCES mnemo.semantic_objects ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, dst_object_id) REFERENCES mnemo.semantic_objects ON DELETE CASCADE
) PARTITION BY HASH (tenant_id);
CREATE INDEX object_links_dst_idx ON mnemo.object_links (tenant_id, dst_object_id);
COMMENT ON TABLE mnemo.object_links IS
'Typed relationships between semantic objects (docs/design.md §Semantic objects and paging).';

-- A session's paging state: the zone of its last compile and the user turn whose goal
-- shift was last applied (a goal shift is applied once).
CREATE TABLE mnemo.paging_state (
    tenant_id text NOT NULL,
    session_id uuid NOT NULL,
    zone text NOT NULL DEFAULT 'normal'
    CHECK (zone IN ('normal', 'caution', 'warning', 'critical', 'emergency')),
    goal_turn integer NOT NULL DEFAULT -1,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id)
) PARTITION BY HASH (tenant_id);
COMMENT ON TABLE mnemo.paging_state IS 'Paging state of a session: its pressure zone and last goal shift.';

SELECT
    mnemo_internal.create_hash_partitions(
        t.tab::regclass,
        (
            SELECT value::integer FROM mnemo_internal.settings
            WHERE key = 'hash_partitions'
        )
    )
FROM unnest(ARRAY[
    'mnemo.semantic_objects', 'mnemo.object_residency', 'mnemo.object_links', 'mnemo.paging_state'
]) AS t (tab);

-- The logs: which object, at which fidelity, and why.
ALTER TABLE mnemo.fidelity_log ADD COLUMN object_id bigint;
ALTER TABLE mnemo.fidelity_log ADD CONSTRAINT fidelity_log_fidelities_check CHECK (
    from_fidelity IN ('full', 'detail', 'compact', 'stub', 'evicted')
    AND to_fidelity IN ('full', 'detail', 'compact', 'stub', 'evicted')
);
ALTER TABLE mnemo.fidelity_log ADD CONSTRAINT fidelity_log_trigger_check CHECK (
    trigger IN ('pressure', 'restore', 'release', 'fault', 'goal_shift', 'cleanup_tag', 'waste')
);
ALTER TABLE mnemo.fidelity_log ADD CONSTRAINT fidelity_log_zone_check CHECK (
    pressure_zone IN ('normal', 'caution', 'warning', 'critical', 'emergency')
);
CREATE INDEX fidelity_log_session_idx ON mnemo.fidelity_log (tenant_id, session_id, created_at);

ALTER TABLE mnemo.fault_log DROP CONSTRAINT fault_log_fault_type_check;
ALTER TABLE mnemo.fault_log ADD CONSTRAINT fault_log_fault_type_check CHECK (
    fault_type IN ('reread', 'restore', 'micro')
);
ALTER TABLE mnemo.fault_log ADD COLUMN object_id bigint;
ALTER TABLE mnemo.fault_log ADD COLUMN fidelity text CHECK (
    fidelity IN ('full', 'detail', 'compact', 'stub', 'evicted')
);
-- a micro-fault's answer came from objects of the context, or from evicted ones
ALTER TABLE mnemo.fault_log ADD COLUMN sources text[] NOT NULL DEFAULT '{}';
CREATE INDEX fault_log_session_idx ON mnemo.fault_log (tenant_id, session_id, created_at);

DO $$
DECLARE
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['semantic_objects', 'object_residency', 'object_links', 'paging_state'] LOOP
        EXECUTE format('ALTER TABLE mnemo.%I ENABLE ROW LEVEL SECURITY', v_table);
        EXECUTE format($p$CREATE POLICY tenant_isolation ON mnemo.%I
            USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
            WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()))$p$, v_table);
    END LOOP;
END
$$;
