-- 0004: memory formation (issue 4): the helper LLM's configuration and key, the
-- extraction watermark per session, and what admission control records per candidate.
-- (0003 is reserved for the lifecycle work.)

-- Helper LLM: an OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama). A reference
-- table without tenant: configured by the owner with mnemo.set_helper_llm(). Both
-- tables live in mnemo_internal, where mnemo_app has no table privileges, so an
-- application role can neither read the key nor point extraction at its own server.
CREATE TABLE mnemo_internal.helper_llm (
    name text PRIMARY KEY DEFAULT 'default' CHECK (name ~ '^[a-z0-9_-]{1,40}$'),
    base_url text NOT NULL CHECK (base_url ~ '^https?://[^\s]+$'),
    model text NOT NULL CHECK (model <> ''),
    timeout_s real NOT NULL DEFAULT 20 CHECK (timeout_s > 0 AND timeout_s <= 600),
    max_retries integer NOT NULL DEFAULT 2 CHECK (max_retries BETWEEN 0 AND 10),
    backoff_s real NOT NULL DEFAULT 1 CHECK (backoff_s >= 0 AND backoff_s <= 60),
    enabled boolean NOT NULL DEFAULT true,
    options jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(options) = 'object'),
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE mnemo_internal.helper_llm IS
'OpenAI-compatible helper LLM endpoints (base URL, model, timeout, retries); owner only.';

CREATE TABLE mnemo_internal.helper_llm_keys (
    name text PRIMARY KEY REFERENCES mnemo_internal.helper_llm (name) ON DELETE CASCADE,
    api_key text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE mnemo_internal.helper_llm_keys IS
'API keys of the helper LLM endpoints; readable by the owner role only.';
REVOKE ALL ON mnemo_internal.helper_llm, mnemo_internal.helper_llm_keys FROM public;

-- How far extraction got in each session (the extract job resumes after it).
CREATE TABLE mnemo.extraction_state (
    tenant_id text NOT NULL,
    session_id uuid NOT NULL,
    upto_turn integer NOT NULL DEFAULT -1,
    method text,
    runs integer NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id)
) PARTITION BY HASH (tenant_id);
COMMENT ON TABLE mnemo.extraction_state IS
'Per session: the last turn the extract job has turned into memory candidates.';

-- Admission control records every candidate once: its kind, normalised-content hash
-- and source messages make re-running extraction on the same messages a no-op.
ALTER TABLE mnemo.admission_log
ADD COLUMN kind text,
ADD COLUMN candidate_hash bytea,
ADD COLUMN source_message_ids bigint[] NOT NULL DEFAULT '{}',
ADD COLUMN decision text,
ADD COLUMN method text;
CREATE INDEX admission_log_hash_idx ON mnemo.admission_log (tenant_id, candidate_hash);
CREATE INDEX admission_log_memory_idx ON mnemo.admission_log (tenant_id, memory_id)
WHERE memory_id IS NOT NULL;
CREATE INDEX memory_versions_memory_idx ON mnemo.memory_versions (tenant_id, memory_id);
CREATE INDEX entity_edges_memory_idx ON mnemo.entity_edges (tenant_id, memory_id)
WHERE memory_id IS NOT NULL;
CREATE INDEX memories_sources_idx ON mnemo.memories USING gin (source_message_ids);

SELECT mnemo_internal.create_hash_partitions(
    'mnemo.extraction_state'::regclass,
    (
        SELECT value::integer FROM mnemo_internal.settings
        WHERE key = 'hash_partitions'
    ),
    NULL,
    false
);

ALTER TABLE mnemo.extraction_state ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mnemo.extraction_state
USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()));
