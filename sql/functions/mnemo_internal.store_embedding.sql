-- mnemo_internal.store_embedding(p_tenant_id, p_payload, p_embedding) -> void
-- Stores the result of an 'embed' job on its message or memory.
-- Writes: mnemo.messages.embedding or mnemo.memories.embedding.
CREATE OR REPLACE FUNCTION mnemo_internal.store_embedding(
    p_tenant_id text, p_payload jsonb, p_embedding vector
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    CASE p_payload ->> 'target'
        WHEN 'message' THEN
            UPDATE mnemo.messages AS m SET embedding = p_embedding
            WHERE m.tenant_id = p_tenant_id AND m.message_id = (p_payload ->> 'message_id')::bigint
                AND m.created_at = (p_payload ->> 'created_at')::timestamptz;
        WHEN 'memory' THEN
            UPDATE mnemo.memories AS mem SET embedding = p_embedding
            WHERE mem.tenant_id = p_tenant_id AND mem.memory_id = (p_payload ->> 'memory_id')::bigint;
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'MN001',
                MESSAGE = format('unknown embed target %L', p_payload ->> 'target');
    END CASE;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.store_embedding(text, jsonb, vector) IS
'Writes an embedding onto the message or memory an embed job names.';
