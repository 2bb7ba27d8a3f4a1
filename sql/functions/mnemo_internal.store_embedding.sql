-- mnemo_internal.store_embedding(p_tenant_id, p_payload, p_embedding, p_sentences) -> tsvector
-- Stores the result of an 'embed' job on its message or memory, and a message's
-- extractive levels (mnemo_internal.message_levels) and its sentences' vectors
-- (p_sentences, embed_target_sentences' in order; NULL: none) with it, in one
-- UPDATE. Returns the row's
-- search tsvector when this is its first embedding (the caller then counts it into
-- mnemo.lexicon, once), else NULL; never a digest's (source_key digest:...).
-- Writes: mnemo.messages.embedding, levels and sentence_embeddings, or mnemo.memories.embedding.
CREATE OR REPLACE FUNCTION mnemo_internal.store_embedding(
    p_tenant_id text, p_payload jsonb, p_embedding vector, p_sentences vector[]
) RETURNS tsvector
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_first boolean;
    v_tsv tsvector;
BEGIN
    CASE p_payload ->> 'target'
        WHEN 'message' THEN
            -- the epoch as created_at - 'epoch' (IMMUTABLE; the same number): Citus takes
            -- only IMMUTABLE functions in an UPDATE's coalesce
            UPDATE mnemo.messages AS m SET embedding = p_embedding, sentence_embeddings = p_sentences,
                levels = coalesce(m.levels, mnemo_internal.message_levels(
                    m.content, m.role, m.token_count, extract(epoch FROM m.created_at - 'epoch'::timestamptz)::float8))
            FROM (SELECT o.embedding IS NULL AS first FROM mnemo.messages AS o
                WHERE o.tenant_id = p_tenant_id AND o.message_id = (p_payload ->> 'message_id')::bigint
                    AND o.created_at = (p_payload ->> 'created_at')::timestamptz) AS o
            WHERE m.tenant_id = p_tenant_id AND m.message_id = (p_payload ->> 'message_id')::bigint
                AND m.created_at = (p_payload ->> 'created_at')::timestamptz
            RETURNING o.first, m.search_tsv INTO v_first, v_tsv;
        WHEN 'memory' THEN
            UPDATE mnemo.memories AS mem SET embedding = p_embedding
            -- (a digest, lifecycle/digests.py, restates its members: counting it
            -- would count their words twice into the tenant's BM25 statistics)
            FROM (SELECT o.embedding IS NULL AND coalesce(o.source_key, '') NOT LIKE 'digest:%' AS first
                FROM mnemo.memories AS o
                WHERE o.tenant_id = p_tenant_id AND o.memory_id = (p_payload ->> 'memory_id')::bigint) AS o
            WHERE mem.tenant_id = p_tenant_id AND mem.memory_id = (p_payload ->> 'memory_id')::bigint
            RETURNING o.first, mem.search_tsv INTO v_first, v_tsv;
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'MN001',
                MESSAGE = format('unknown embed target %L', p_payload ->> 'target');
    END CASE;
    RETURN CASE WHEN v_first THEN v_tsv END;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.store_embedding(text, jsonb, vector, vector[]) IS
'Writes an embedding onto the message or memory an embed job names; returns its tsvector the first time.';
