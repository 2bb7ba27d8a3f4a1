-- 0017: retrieval for large tenants bounded by k (issue 27). compile_context scores a
-- tenant's sealed messages and its memories whole (message_segments, CANDIDATE_POOL):
-- fine for a thousand messages, linear in a tenant's history beyond. A tenant past a
-- size threshold gets its own recall index: its sealed messages' and its memories'
-- vectors (halfvec) and lexemes in mnemo_internal.recall_index, with an HNSW and a GIN index
-- of its own (partial: WHERE tenant_id = that tenant, so a KNN needs no tenant filter
-- and keeps the graph's recall), kept by the segments sweep
-- (mnemo_internal.sync_recall_index). compile_context then reads the k nearest, the
-- postings of the query's terms and the rows they name; the live tail after the
-- index is still scored whole (docs/performance.md: why not the global HNSW index).

-- One row per sealed message or memory of a large tenant. item_id: the message's or
-- the memory's id. created_at: a message's partition key (its rows are looked up by
-- their whole primary key). A message pruned since, or a memory no longer active, is
-- dropped when the rows are read (and by the next sync for memories); a memory that
-- is erased (forget) takes its row with it (memory_id's foreign key).
-- Internal tables, without row-level security: under it, a condition that calls a
-- function that is not leakproof (the text search match @@) cannot be an index
-- condition, and the GIN index went unused. The API owner only reads them (in
-- compile_context, for the tenant it acts for, named in each statement); no
-- application role may (sql/grants.sql).
CREATE TABLE mnemo_internal.recall_index (
    tenant_id text NOT NULL REFERENCES mnemo.tenants ON DELETE CASCADE,
    is_memory boolean NOT NULL,
    item_id bigint NOT NULL,
    created_at timestamptz NOT NULL,
    embedding halfvec(384),
    search_tsv tsvector NOT NULL,
    memory_id bigint GENERATED ALWAYS AS (CASE WHEN is_memory THEN item_id END) STORED,
    PRIMARY KEY (tenant_id, is_memory, item_id),
    FOREIGN KEY (tenant_id, memory_id) REFERENCES mnemo.memories ON DELETE CASCADE
);
CREATE INDEX recall_index_memory_idx ON mnemo_internal.recall_index (tenant_id, memory_id)
WHERE memory_id IS NOT NULL;
COMMENT ON TABLE mnemo_internal.recall_index IS
'A large tenant''s sealed messages and memories as vectors and lexemes, with indexes of its own.';

-- The tenants that have a recall index: how far it reaches (messages_up_to: every
-- recallable message with an id up to it is in; memories_synced_at: every memory
-- updated before it is), and its indexes' names.
CREATE TABLE mnemo_internal.recall_tenants (
    tenant_id text PRIMARY KEY REFERENCES mnemo.tenants ON DELETE CASCADE,
    messages_up_to bigint NOT NULL,
    memories_synced_at timestamptz NOT NULL,
    hnsw_index name NOT NULL,
    gin_index name NOT NULL,
    built_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE mnemo_internal.recall_tenants IS
'Tenants with a recall index (mnemo_internal.recall_index): how far it reaches, and its indexes.';

-- What an indexed compile reads besides the recall index, by index: the memories
-- changed since the last sync, the pinned ones, the most used ones.
CREATE INDEX memories_updated_idx ON mnemo.memories (tenant_id, updated_at);
CREATE INDEX memories_pinned_idx ON mnemo.memories (tenant_id) WHERE is_pinned AND is_active;
CREATE INDEX memory_access_count_idx ON mnemo.memory_access (tenant_id, access_count DESC);

-- message_segment gained p_ids (the rows of an id set): the old signature goes.
DROP FUNCTION IF EXISTS mnemo_internal.message_segment(text, bigint, bigint, integer, text[]);
