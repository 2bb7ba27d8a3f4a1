-- 0002: per-tenant term statistics for BM25 ranking in compile_context.
-- PostgreSQL's ts_rank has no inverse document frequency, and questions retrieve far
-- better when rare terms weigh more than common ones (measured on LoCoMo: recall@10
-- 0.57 without IDF, 0.63 with it, both fused with the embedding cosine). The embed
-- job adds each message's and memory's lexemes once, in the same transaction as its
-- embedding; the row with lexeme '' holds the document count and total length.
CREATE TABLE mnemo.lexicon (
    tenant_id text NOT NULL,
    lexeme text NOT NULL,
    doc_count bigint NOT NULL DEFAULT 0,
    total_length bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, lexeme)
) PARTITION BY HASH (tenant_id);

SELECT mnemo_internal.create_hash_partitions(
    'mnemo.lexicon'::regclass,
    (
        SELECT value::integer FROM mnemo_internal.settings
        WHERE key = 'hash_partitions'
    ),
    NULL,
    false
);

ALTER TABLE mnemo.lexicon ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mnemo.lexicon
USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()));
COMMENT ON TABLE mnemo.lexicon IS
'Per-tenant document frequencies of lexemes (BM25 statistics); lexeme '''' holds totals.';

-- Access statistics are counted from the context log off the hot path (job
-- 'record_access'); a row is counted once.
ALTER TABLE mnemo.context_log ADD COLUMN accounted boolean NOT NULL DEFAULT false;
CREATE INDEX context_log_unaccounted_idx ON mnemo.context_log (tenant_id, session_id)
WHERE NOT accounted;
