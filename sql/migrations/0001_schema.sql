-- 0001: the data planes (docs/design.md §Planes). Runs once (recorded in
-- mnemo_internal.schema_migrations). Every tenant table is hash-partitioned by
-- tenant_id and every primary key includes tenant_id, so one tenant's work stays in
-- one partition per table (and the tables can be distributed by Citus unchanged).

-- Tenants and the roles bound to them -------------------------------------------
CREATE TABLE mnemo.tenants (
    tenant_id text PRIMARY KEY CHECK (tenant_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$'),
    display_name text,
    config jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A login role listed here acts for its tenant only (see mnemo.bind_role).
CREATE TABLE mnemo_internal.role_tenants (
    role_name name PRIMARY KEY,
    tenant_id text NOT NULL REFERENCES mnemo.tenants (tenant_id) ON DELETE CASCADE
);

-- Sessions --------------------------------------------------------------------
CREATE TABLE mnemo.system_prompts (
    tenant_id text NOT NULL,
    prompt_hash bytea NOT NULL,
    content text NOT NULL,
    token_count integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, prompt_hash)
) PARTITION BY HASH (tenant_id);

CREATE TABLE mnemo.sessions (
    tenant_id text NOT NULL,
    session_id uuid NOT NULL DEFAULT gen_random_uuid(),
    agent_id text NOT NULL DEFAULT 'default',
    channel text NOT NULL DEFAULT 'private'
    CHECK (channel IN ('private', 'team', 'public', 'agent')),
    status text NOT NULL DEFAULT 'active'
    CHECK (status IN ('active', 'paused', 'closed', 'expired')),
    model text NOT NULL DEFAULT 'gpt-4o',
    context_window integer NOT NULL DEFAULT 128000 CHECK (context_window > 0),
    response_reserve integer NOT NULL DEFAULT 4096 CHECK (response_reserve >= 0),
    system_prompt_hash bytea,
    system_prompt_tokens integer NOT NULL DEFAULT 0,
    temperature real,
    config jsonb NOT NULL DEFAULT '{}',
    turn_count integer NOT NULL DEFAULT 0,
    total_prompt_tokens bigint NOT NULL DEFAULT 0,
    total_completion_tokens bigint NOT NULL DEFAULT 0,
    total_cost_microcents bigint NOT NULL DEFAULT 0,
    summary_text text,
    summary_tokens integer NOT NULL DEFAULT 0,
    summary_upto_turn integer,
    summary_embedding vector(384),
    parent_session_id uuid,
    metadata jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    PRIMARY KEY (tenant_id, session_id)
) PARTITION BY HASH (tenant_id);
CREATE INDEX sessions_tenant_active_idx ON mnemo.sessions (tenant_id, updated_at DESC)
WHERE status = 'active';
CREATE INDEX sessions_tenant_created_idx ON mnemo.sessions (tenant_id, created_at DESC);
CREATE INDEX sessions_expiry_idx ON mnemo.sessions (expires_at) WHERE status <> 'expired';
CREATE INDEX sessions_summary_hnsw_idx ON mnemo.sessions
USING hnsw (summary_embedding vector_cosine_ops) WHERE summary_embedding IS NOT NULL;

-- Messages: append-only history, hash by tenant then range by month --------------
CREATE SEQUENCE mnemo.messages_message_id_seq;
CREATE TABLE mnemo.messages (
    tenant_id text NOT NULL,
    message_id bigint NOT NULL DEFAULT nextval('mnemo.messages_message_id_seq'),
    session_id uuid NOT NULL,
    turn_index integer NOT NULL,
    role text NOT NULL CHECK (role IN ('system', 'developer', 'user', 'assistant', 'tool')),
    content text,
    content_parts jsonb,
    name text,
    tool_calls jsonb,
    tool_call_id text,
    token_count integer NOT NULL,
    content_hash bytea NOT NULL,
    sensitivity text NOT NULL DEFAULT 'none'
    CHECK (sensitivity IN ('none', 'low', 'high', 'secret')),
    tags text[] NOT NULL DEFAULT '{}',
    artifact_id bigint,
    model text,
    finish_reason text,
    prompt_tokens integer,
    completion_tokens integer,
    latency_ms integer,
    embedding vector(384),
    is_compacted boolean NOT NULL DEFAULT false,
    compacted_into bigint,
    is_pruned boolean NOT NULL DEFAULT false,
    metadata jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    search_tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', coalesce(content, ''))) STORED,
    PRIMARY KEY (tenant_id, message_id, created_at)
) PARTITION BY HASH (tenant_id);
CREATE INDEX messages_session_turn_idx ON mnemo.messages (tenant_id, session_id, turn_index DESC);
CREATE INDEX messages_session_active_idx ON mnemo.messages (tenant_id, session_id, turn_index DESC)
WHERE NOT is_compacted AND NOT is_pruned;
CREATE INDEX messages_compaction_idx ON mnemo.messages (tenant_id, session_id, created_at)
WHERE NOT is_compacted;
CREATE INDEX messages_embedding_hnsw_idx ON mnemo.messages
USING hnsw (embedding vector_cosine_ops) WHERE embedding IS NOT NULL;
CREATE INDEX messages_tsv_idx ON mnemo.messages USING gin (search_tsv);
CREATE INDEX messages_tags_idx ON mnemo.messages USING gin (tags);

-- Tool calls issued by assistant messages, so that a tool result is checked
-- against its call in O(1) and the pair is kept together when packing.
CREATE TABLE mnemo.tool_calls (
    tenant_id text NOT NULL,
    session_id uuid NOT NULL,
    tool_call_id text NOT NULL,
    message_id bigint NOT NULL,
    turn_index integer NOT NULL,
    name text,
    result_message_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id, tool_call_id)
) PARTITION BY HASH (tenant_id);

-- Full bytes of large tool outputs (the message keeps a bounded excerpt).
CREATE SEQUENCE mnemo.artifacts_artifact_id_seq;
CREATE TABLE mnemo.artifacts (
    tenant_id text NOT NULL,
    artifact_id bigint NOT NULL DEFAULT nextval('mnemo.artifacts_artifact_id_seq'),
    session_id uuid,
    message_id bigint,
    kind text NOT NULL DEFAULT 'tool_output',
    media_type text NOT NULL DEFAULT 'text/plain; charset=utf-8',
    bytes bytea NOT NULL,
    byte_size bigint NOT NULL,
    sha256 bytea NOT NULL,
    meta jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, artifact_id)
) PARTITION BY HASH (tenant_id);
CREATE INDEX artifacts_session_idx ON mnemo.artifacts (tenant_id, session_id, created_at DESC);

-- Memories: tiered store, each memory at four fidelities ---------------------------
CREATE SEQUENCE mnemo.memories_memory_id_seq;
CREATE TABLE mnemo.memories (
    tenant_id text NOT NULL,
    memory_id bigint NOT NULL DEFAULT nextval('mnemo.memories_memory_id_seq'),
    session_id uuid,
    tier text NOT NULL DEFAULT 'session'
    CHECK (tier IN ('session', 'episodic', 'semantic', 'procedural')),
    scope text NOT NULL DEFAULT 'local' CHECK (scope IN ('local', 'global')),
    kind text NOT NULL CHECK (kind IN (
        'fact', 'preference', 'instruction', 'decision', 'task', 'open_loop', 'summary',
        'file_context', 'tool_result', 'error_context', 'plan', 'note', 'conversation_phase',
        'external_reference'
    )),
    content_full text NOT NULL,
    content_detail text,
    content_compact text,
    content_stub text NOT NULL,
    tokens_full integer NOT NULL,
    tokens_detail integer,
    tokens_compact integer,
    tokens_stub integer NOT NULL,
    -- Declared losses per fidelity: {"detail": {"dropped": [...], "can_answer": [...],
    -- "fault_when": [...]}, "compact": {...}, "stub": {...}}; they accumulate downwards.
    losses jsonb NOT NULL DEFAULT '{}',
    key_entities text[] NOT NULL DEFAULT '{}',
    provenance_type text NOT NULL DEFAULT 'system_inferred' CHECK (provenance_type IN (
        'user_stated', 'correction', 'instruction', 'preference', 'fact',
        'system_inferred', 'tool_output'
    )),
    provenance jsonb NOT NULL DEFAULT '{}',
    source_message_ids bigint[] NOT NULL DEFAULT '{}',
    confidence real NOT NULL DEFAULT 0.5 CHECK (confidence BETWEEN 0 AND 1),
    relevance_accumulator real NOT NULL DEFAULT 0,
    access_count integer NOT NULL DEFAULT 0,
    last_accessed_at timestamptz,
    valid_from timestamptz NOT NULL DEFAULT now(),
    valid_to timestamptz,
    expires_at timestamptz,
    is_active boolean NOT NULL DEFAULT true,
    is_validated boolean NOT NULL DEFAULT false,
    is_pinned boolean NOT NULL DEFAULT false,
    superseded_by bigint,
    source_key text,
    tags text[] NOT NULL DEFAULT '{}',
    sensitivity text NOT NULL DEFAULT 'none'
    CHECK (sensitivity IN ('none', 'low', 'high', 'secret')),
    content_hash bytea NOT NULL,
    embedding vector(384),
    metadata jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    search_tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', content_full)) STORED,
    PRIMARY KEY (tenant_id, memory_id)
) PARTITION BY HASH (tenant_id);
CREATE INDEX memories_tier_idx ON mnemo.memories (tenant_id, tier) WHERE is_active;
CREATE INDEX memories_scope_idx ON mnemo.memories (tenant_id, scope, tier) WHERE is_active;
CREATE INDEX memories_session_idx ON mnemo.memories (tenant_id, session_id) WHERE is_active;
CREATE INDEX memories_hash_idx ON mnemo.memories (tenant_id, content_hash);
CREATE INDEX memories_embedding_hnsw_idx ON mnemo.memories
USING hnsw (embedding vector_cosine_ops) WHERE is_active AND embedding IS NOT NULL;
CREATE INDEX memories_expiry_idx ON mnemo.memories (expires_at)
WHERE expires_at IS NOT NULL AND is_active;
CREATE INDEX memories_tags_idx ON mnemo.memories USING gin (tags) WHERE is_active;
CREATE INDEX memories_tsv_idx ON mnemo.memories USING gin (search_tsv) WHERE is_active;
CREATE INDEX memories_trgm_idx ON mnemo.memories USING gin (content_full gin_trgm_ops)
WHERE is_active;
CREATE INDEX memories_superseded_idx ON mnemo.memories (tenant_id, superseded_by)
WHERE superseded_by IS NOT NULL;
CREATE INDEX memories_source_key_idx ON mnemo.memories (tenant_id, source_key)
WHERE source_key IS NOT NULL AND is_active;

-- Working memory: ephemeral per-session state, UNLOGGED (rebuilt from durable data).
CREATE TABLE mnemo.working_memory (
    tenant_id text NOT NULL,
    session_id uuid NOT NULL,
    item_key text NOT NULL,
    kind text NOT NULL DEFAULT 'note',
    content text NOT NULL,
    token_count integer NOT NULL DEFAULT 0,
    memory_id bigint,
    pinned_until_turn integer,
    payload jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    PRIMARY KEY (tenant_id, session_id, item_key)
) PARTITION BY HASH (tenant_id);

-- Typed payloads that do not fit free text, keyed by memory.
CREATE TABLE mnemo.memory_facts (
    tenant_id text NOT NULL,
    memory_id bigint NOT NULL,
    subject text NOT NULL,
    predicate text NOT NULL,
    object text NOT NULL,
    subject_entity_id bigint,
    object_entity_id bigint,
    valid_from timestamptz,
    valid_to timestamptz,
    PRIMARY KEY (tenant_id, memory_id)
) PARTITION BY HASH (tenant_id);
CREATE INDEX memory_facts_subject_idx ON mnemo.memory_facts (tenant_id, subject, predicate);

CREATE TABLE mnemo.memory_decisions (
    tenant_id text NOT NULL,
    memory_id bigint NOT NULL,
    decision text NOT NULL,
    status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'superseded')),
    rationale text[] NOT NULL DEFAULT '{}',
    alternatives text[] NOT NULL DEFAULT '{}',
    constraints text[] NOT NULL DEFAULT '{}',
    consequences text[] NOT NULL DEFAULT '{}',
    refs text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, memory_id)
) PARTITION BY HASH (tenant_id);

CREATE TABLE mnemo.memory_tasks (
    tenant_id text NOT NULL,
    memory_id bigint NOT NULL,
    title text NOT NULL,
    status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'doing', 'done', 'dropped')),
    due_at timestamptz,
    expires_at timestamptz,
    PRIMARY KEY (tenant_id, memory_id)
) PARTITION BY HASH (tenant_id);

CREATE TABLE mnemo.memory_versions (
    tenant_id text NOT NULL,
    memory_id bigint NOT NULL,
    version integer NOT NULL,
    change text NOT NULL,
    reason text,
    old_value jsonb,
    new_value jsonb,
    changed_by text NOT NULL DEFAULT current_user,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, memory_id, version)
) PARTITION BY HASH (tenant_id);

-- Graph ---------------------------------------------------------------------------
CREATE SEQUENCE mnemo.entities_entity_id_seq;
CREATE TABLE mnemo.entities (
    tenant_id text NOT NULL,
    entity_id bigint NOT NULL DEFAULT nextval('mnemo.entities_entity_id_seq'),
    kind text NOT NULL DEFAULT 'thing',
    name text NOT NULL,
    normalized text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, entity_id),
    UNIQUE (tenant_id, kind, normalized)
) PARTITION BY HASH (tenant_id);

CREATE TABLE mnemo.entity_aliases (
    tenant_id text NOT NULL,
    alias_normalized text NOT NULL,
    entity_id bigint NOT NULL,
    alias text NOT NULL,
    PRIMARY KEY (tenant_id, alias_normalized, entity_id)
) PARTITION BY HASH (tenant_id);

CREATE TABLE mnemo.entity_mentions (
    tenant_id text NOT NULL,
    memory_id bigint NOT NULL,
    entity_id bigint NOT NULL,
    role text NOT NULL DEFAULT 'mention',
    PRIMARY KEY (tenant_id, memory_id, entity_id, role)
) PARTITION BY HASH (tenant_id);
CREATE INDEX entity_mentions_entity_idx ON mnemo.entity_mentions (tenant_id, entity_id);

CREATE TABLE mnemo.entity_edges (
    tenant_id text NOT NULL,
    src_entity_id bigint NOT NULL,
    relation text NOT NULL,
    dst_entity_id bigint NOT NULL,
    weight real NOT NULL DEFAULT 1,
    memory_id bigint,
    valid_from timestamptz,
    valid_to timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, src_entity_id, relation, dst_entity_id)
) PARTITION BY HASH (tenant_id);
CREATE INDEX entity_edges_dst_idx ON mnemo.entity_edges (tenant_id, dst_entity_id);

CREATE TABLE mnemo.memory_links (
    tenant_id text NOT NULL,
    src_memory_id bigint NOT NULL,
    relation text NOT NULL CHECK (relation IN (
        'supersedes', 'derived_from', 'depends_on', 'references', 'caused_by', 'parent_of'
    )),
    dst_memory_id bigint NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, src_memory_id, relation, dst_memory_id)
) PARTITION BY HASH (tenant_id);
CREATE INDEX memory_links_dst_idx ON mnemo.memory_links (tenant_id, dst_memory_id);

-- Operations ------------------------------------------------------------------------
CREATE SEQUENCE mnemo.jobs_job_id_seq;
CREATE TABLE mnemo.jobs (
    tenant_id text NOT NULL,
    job_id bigint NOT NULL DEFAULT nextval('mnemo.jobs_job_id_seq'),
    kind text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}',
    -- Jobs with the same (kind, dedup_key) queued at once collapse into one.
    dedup_key text NOT NULL,
    status text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'done', 'failed')),
    tries integer NOT NULL DEFAULT 0,
    run_after timestamptz NOT NULL DEFAULT now(),
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (tenant_id, job_id)
) PARTITION BY HASH (tenant_id);
CREATE UNIQUE INDEX jobs_dedup_idx ON mnemo.jobs (tenant_id, kind, dedup_key)
WHERE status = 'queued';
CREATE INDEX jobs_queue_idx ON mnemo.jobs (run_after) WHERE status = 'queued';

CREATE SEQUENCE mnemo.context_log_context_id_seq;
CREATE TABLE mnemo.context_log (
    tenant_id text NOT NULL,
    context_id bigint NOT NULL DEFAULT nextval('mnemo.context_log_context_id_seq'),
    session_id uuid NOT NULL,
    query text,
    task_type text,
    budget integer NOT NULL,
    tokens_used integer NOT NULL,
    sections jsonb NOT NULL DEFAULT '{}',
    items jsonb NOT NULL DEFAULT '[]',
    omissions jsonb NOT NULL DEFAULT '[]',
    provenance jsonb NOT NULL DEFAULT '{}',
    latency_ms real,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, context_id)
) PARTITION BY HASH (tenant_id);
CREATE INDEX context_log_session_idx ON mnemo.context_log (tenant_id, session_id, created_at DESC);

CREATE TABLE mnemo.fault_log (
    tenant_id text NOT NULL,
    fault_id bigint GENERATED ALWAYS AS IDENTITY,
    session_id uuid NOT NULL,
    memory_id bigint,
    fault_type text NOT NULL CHECK (fault_type IN ('full_restore', 'micro_fault', 'release')),
    turn_index integer,
    question text,
    answer text,
    answer_tokens integer,
    avoided_tokens integer,
    latency_ms real,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, fault_id)
) PARTITION BY HASH (tenant_id);

CREATE TABLE mnemo.fidelity_log (
    tenant_id text NOT NULL,
    transition_id bigint GENERATED ALWAYS AS IDENTITY,
    session_id uuid,
    memory_id bigint,
    message_id bigint,
    from_fidelity text NOT NULL,
    to_fidelity text NOT NULL,
    trigger text NOT NULL,
    pressure_zone text,
    turn_index integer,
    token_count integer,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, transition_id)
) PARTITION BY HASH (tenant_id);

CREATE TABLE mnemo.admission_log (
    tenant_id text NOT NULL,
    admission_id bigint GENERATED ALWAYS AS IDENTITY,
    session_id uuid,
    memory_id bigint,
    admitted boolean NOT NULL,
    score_total real NOT NULL,
    score_type real NOT NULL,
    score_novelty real NOT NULL,
    score_utility real NOT NULL,
    score_recency real NOT NULL,
    threshold real NOT NULL,
    content_preview text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, admission_id)
) PARTITION BY HASH (tenant_id);

-- Partitions and row-level security ---------------------------------------------------
SELECT
    mnemo_internal.create_hash_partitions(
        t.tab::regclass,
        (
            SELECT value::integer FROM mnemo_internal.settings
            WHERE key = 'hash_partitions'
        ),
        CASE WHEN t.tab = 'mnemo.messages' THEN 'RANGE (created_at)' END,
        t.tab = 'mnemo.working_memory'
    )
FROM unnest(ARRAY[
    'mnemo.system_prompts', 'mnemo.sessions', 'mnemo.messages', 'mnemo.tool_calls',
    'mnemo.artifacts', 'mnemo.memories', 'mnemo.working_memory', 'mnemo.memory_facts',
    'mnemo.memory_decisions', 'mnemo.memory_tasks', 'mnemo.memory_versions',
    'mnemo.entities', 'mnemo.entity_aliases', 'mnemo.entity_mentions', 'mnemo.entity_edges',
    'mnemo.memory_links', 'mnemo.jobs', 'mnemo.context_log', 'mnemo.fault_log',
    'mnemo.fidelity_log', 'mnemo.admission_log'
]) AS t (tab);

SELECT mnemo.create_message_partitions(
    (current_date - interval '1 month')::date,
    1 + (
        SELECT value::integer FROM mnemo_internal.settings
        WHERE key = 'message_partition_months_ahead'
    )
);

-- Row-level security on every table that has a tenant_id: a member of mnemo_app
-- sees and writes only the rows of the tenant it acts for (see
-- mnemo_internal.current_tenant_id). Privileges are granted on the parent tables
-- only, so a partition cannot be read around the policy.
DO $$
DECLARE
    v_table regclass;
BEGIN
    FOR v_table IN
        SELECT c.oid::regclass
        FROM pg_class AS c
        WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p')
            AND NOT c.relispartition
            AND EXISTS (SELECT FROM pg_attribute AS a
                WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v_table);
        EXECUTE format(
            'CREATE POLICY tenant_isolation ON %s
             USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
             WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()))', v_table);
    END LOOP;
END
$$;

ALTER TABLE mnemo_internal.role_tenants ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_binding ON mnemo_internal.role_tenants
USING (role_name IN (current_user, session_user));
