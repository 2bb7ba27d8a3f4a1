-- mnemo_internal.sync_recall_index(p_tenant_id, p_min_messages) -> integer
-- Brings a tenant's recall index (mnemo_internal.recall_index, migration 0017) up to its
-- sealed messages and its memories; returns the rows written. A tenant without one
-- gets one once at least p_min_messages of its messages are sealed (NULL: the
-- setting recall_index_min_messages): its rows first, then its own indexes (partial:
-- WHERE tenant_id = it), built once over the rows rather than row by row: an HNSW
-- index over its messages, one over its memories, a GIN index over both.
-- Afterwards each call adds the messages sealed since (message_segments decides
-- what is recallable and when: the index never runs ahead of the segments)
-- and re-reads the memories: a memory that is gone or no longer active leaves, one
-- that is new, changed since the last sync, or embedded since it came in is written
-- again. A compile reads the memories changed since memories_synced_at itself.
-- Called by the segments sweep for each tenant it looks at. Writes:
-- recall_index, recall_tenants.
CREATE OR REPLACE FUNCTION mnemo_internal.sync_recall_index(
    p_tenant_id text, p_min_messages bigint DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
-- The indexes are built by this backend alone: a parallel HNSW build keeps its graph in
-- dynamic shared memory (up to maintenance_work_mem), more than a container's default
-- /dev/shm (64 MB) holds, and failed there with DiskFull; a tenant's index is small.
SET max_parallel_maintenance_workers = 0
AS $$
DECLARE
    v_known mnemo_internal.recall_tenants;
    v_sealed_to bigint;
    v_sealed bigint;
    -- a memory written by a transaction still open now commits with an updated_at
    -- before this: a margin, so that the next sync and the compiles still see it
    v_synced timestamptz := clock_timestamp() - interval '5 minutes';
    v_key text := substr(md5(p_tenant_id), 1, 16);
    v_msg_hnsw text := 'recall_index_msg_hnsw_' || v_key;
    v_mem_hnsw text := 'recall_index_mem_hnsw_' || v_key;
    v_gin text := 'recall_index_gin_' || v_key;
    v_index text;
    v_definition text;
    v_rows integer;
    v_written integer := 0;
    v_built boolean := false;
BEGIN
    SELECT * INTO v_known FROM mnemo_internal.recall_tenants AS r WHERE r.tenant_id = p_tenant_id;
    SELECT coalesce(max(s.last_message_id), 0), coalesce(sum(s.n_messages), 0) INTO v_sealed_to, v_sealed
    FROM mnemo.message_segments AS s WHERE s.tenant_id = p_tenant_id;
    IF v_known.tenant_id IS NULL AND v_sealed < coalesce(p_min_messages,
            (mnemo_internal.setting('recall_index_min_messages') #>> '{}')::bigint) THEN
        RETURN 0;
    END IF;
    -- what the segments hold as recallable (mnemo_internal.message_segment)
    INSERT INTO mnemo_internal.recall_index AS r (tenant_id, is_memory, item_id, created_at, embedding, search_tsv)
    SELECT m.tenant_id, false, m.message_id, m.created_at, m.embedding::halfvec, m.search_tsv
    FROM mnemo.messages AS m
    WHERE m.tenant_id = p_tenant_id AND m.message_id > coalesce(v_known.messages_up_to, 0)
        AND m.message_id <= v_sealed_to
        AND NOT m.is_pruned AND m.content IS NOT NULL AND m.role IN ('user', 'assistant', 'tool')
        AND m.sensitivity <> 'secret'
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    v_written := v_written + v_rows;
    DELETE FROM mnemo_internal.recall_index AS r
    WHERE r.tenant_id = p_tenant_id AND r.is_memory AND NOT EXISTS (
        SELECT FROM mnemo.memories AS mm
        WHERE mm.tenant_id = p_tenant_id AND mm.memory_id = r.item_id AND mm.is_active);
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    v_written := v_written + v_rows;
    INSERT INTO mnemo_internal.recall_index AS r (tenant_id, is_memory, item_id, created_at, embedding, search_tsv)
    SELECT mm.tenant_id, true, mm.memory_id, mm.created_at, mm.embedding::halfvec, mm.search_tsv
    FROM mnemo.memories AS mm
    LEFT JOIN mnemo_internal.recall_index AS old
        ON old.tenant_id = p_tenant_id AND old.is_memory AND old.item_id = mm.memory_id
    WHERE mm.tenant_id = p_tenant_id AND mm.is_active
        AND (old.item_id IS NULL OR mm.updated_at >= v_known.memories_synced_at
            OR old.embedding IS NULL AND mm.embedding IS NOT NULL)
    -- locked against a delete until this sweep's batch commits: a memory that a
    -- forget() erased after this statement's snapshot is skipped (the lock waits for
    -- the delete, then drops the row), where the foreign key failed the batch
    FOR KEY SHARE OF mm
    ON CONFLICT (tenant_id, is_memory, item_id)
    DO UPDATE SET embedding = excluded.embedding, search_tsv = excluded.search_tsv;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    v_written := v_written + v_rows;
    -- The tenant's own indexes, built over the rows once they are in (a missing one
    -- again: migration 0024 dropped the HNSW index over both kinds). Two HNSW
    -- indexes, messages apart from memories: memories sit nearer a question than
    -- turns do, and took almost all of the k nearest on a graph of both (0024).
    FOR v_index, v_definition IN VALUES
        (v_msg_hnsw, 'hnsw (embedding halfvec_cosine_ops) WHERE tenant_id = %L AND NOT is_memory'),
        (v_mem_hnsw, 'hnsw (embedding halfvec_cosine_ops) WHERE tenant_id = %L AND is_memory'),
        (v_gin, 'gin (search_tsv) WHERE tenant_id = %L')
    LOOP
        IF to_regclass(format('mnemo_internal.%I', v_index)) IS NULL THEN
            EXECUTE format('CREATE INDEX %I ON mnemo_internal.recall_index USING ' || v_definition,
                v_index, p_tenant_id);
            v_built := true;
        END IF;
    END LOOP;
    IF v_built THEN
        -- The tenant's rows just came in (thousands at once), or an index was missing:
        -- without fresh statistics the planner took its KNN for a few rows and sorted
        -- them all instead of asking the new index (seen in the container's test run).
        ANALYZE mnemo_internal.recall_index;
    END IF;
    IF v_known.tenant_id IS NULL THEN
        INSERT INTO mnemo_internal.recall_tenants (tenant_id, messages_up_to, memories_synced_at,
            hnsw_index, memory_hnsw_index, gin_index)
        VALUES (p_tenant_id, v_sealed_to, v_synced, v_msg_hnsw, v_mem_hnsw, v_gin);
    ELSE
        UPDATE mnemo_internal.recall_tenants AS r SET messages_up_to = greatest(r.messages_up_to, v_sealed_to),
            memories_synced_at = v_synced
        WHERE r.tenant_id = p_tenant_id;
    END IF;
    RETURN v_written;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.sync_recall_index(text, bigint) IS
'Brings a large tenant''s recall index up to its sealed messages and memories (creates it past the threshold).';
