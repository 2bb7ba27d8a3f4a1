-- 0020: the transparent proxy's view of its sessions (issue 23).
-- A client of the proxy resends its whole history on every call and names no
-- session. mnemo.open_session maps a stable key (the client's X-Mnemo-Session, or a
-- hash of its system prompt and first user message) to a session; mnemo.sync_messages
-- records only what is new. A row holds, for one key, the session it maps to and the
-- client's history as recorded so far: the hash of each message as the client sent it
-- (mnemo_internal.wire_hashes) and the message recorded for it, position by position.
-- Positions are the client's, not turn indexes: the lifecycle's compaction and the
-- proxy's memory tool calls add turns the client never sees.
-- rewinds lists the client's rewrites of its own history (a compaction or an edit):
-- [{"position", "superseded" (messages), "at"}] (mnemo.sync_messages).
CREATE TABLE mnemo.transcripts (
    tenant_id text NOT NULL,
    session_key text NOT NULL CHECK (session_key <> '' AND length(session_key) <= 512),
    session_id uuid NOT NULL,
    prompt_hash bytea,
    wire_hashes bytea[] NOT NULL DEFAULT '{}',
    message_ids bigint[] NOT NULL DEFAULT '{}',
    rewinds jsonb NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_key),
    CHECK (cardinality(wire_hashes) = cardinality(message_ids))
) PARTITION BY HASH (tenant_id);
CREATE UNIQUE INDEX transcripts_session_idx ON mnemo.transcripts (tenant_id, session_id);
COMMENT ON TABLE mnemo.transcripts IS
'Proxy session keys and the client''s history as recorded (wire hash and message id per position).';

SELECT
    mnemo_internal.create_hash_partitions(
        'mnemo.transcripts',
        (
            SELECT value::integer FROM mnemo_internal.settings
            WHERE key = 'hash_partitions'
        )
    );

ALTER TABLE mnemo.transcripts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mnemo.transcripts
USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()));
