-- 0007: sealed retrieval segments of a tenant's messages (issue 3, the read path's
-- latency). compile_context scores every message of a tenant it may recall; read
-- row by row that cost ~7 us a message (index scan, filters, BM25, the neighbour
-- order, then a second scan for the cosines): ~9 ms of a ~28 ms compile for a
-- 1,000-message tenant. A segment holds what scoring needs for up to
-- mnemo_internal.build_message_segments' maximum of a tenant's messages, as arrays
-- in message id order (see mnemo_internal.message_segment for the columns), and
-- the postings of their lexemes: one row read instead of a thousand. Messages newer
-- than a tenant's last segment are read live in the same shape (the tail), so a
-- segment is an acceleration structure, never the truth: what changes after it was
-- built (pruning, deletion, a detached month) is checked again when the picked rows
-- are read. Built by the 'segments' sweep (cron/jobs.sql).
CREATE TABLE mnemo.message_segments (
    tenant_id text NOT NULL,
    segment_no integer NOT NULL,
    after_message_id bigint NOT NULL,
    last_message_id bigint NOT NULL,
    built_at timestamptz NOT NULL DEFAULT now(),
    n_messages integer NOT NULL,
    message_ids bytea NOT NULL,
    session_ids uuid[] NOT NULL,
    session_pos bytea NOT NULL,
    turn_index bytea NOT NULL,
    created_epoch bytea NOT NULL,
    token_count bytea NOT NULL,
    stub_tokens bytea NOT NULL,
    doc_length bytea NOT NULL,
    sensitivities text[] NOT NULL,
    sensitivity_pos bytea NOT NULL,
    speakers text[] NOT NULL,
    speaker_pos bytea NOT NULL,
    embedded bytea NOT NULL,
    embedding_norm bytea NOT NULL,
    embeddings bytea NOT NULL,
    lexemes text[] NOT NULL,
    posting_offsets integer[] NOT NULL,
    postings integer[] NOT NULL,
    PRIMARY KEY (tenant_id, segment_no),
    CHECK (after_message_id < last_message_id)
) PARTITION BY HASH (tenant_id);

SELECT mnemo_internal.create_hash_partitions(
    'mnemo.message_segments'::regclass,
    (
        SELECT value::integer FROM mnemo_internal.settings
        WHERE key = 'hash_partitions'
    ),
    NULL,
    false
);

-- The embeddings are read whole at every compile: stored uncompressed (decompressing
-- ~1.5 MB of float4 costs more than reading it). Recurses to the partitions.
ALTER TABLE mnemo.message_segments ALTER COLUMN embeddings SET STORAGE EXTERNAL;

ALTER TABLE mnemo.message_segments ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mnemo.message_segments
USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()));
COMMENT ON TABLE mnemo.message_segments IS
'Sealed retrieval segments: a range of a tenant''s messages as scoring arrays and postings.';
