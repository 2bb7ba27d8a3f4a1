-- mnemo_internal.embed_target_text(p_tenant_id, p_payload) -> text
-- The text an 'embed' job embeds: a message's content (after its author's name,
-- "Caroline: ...", when it has one: who said something is half of what a question
-- asks: docs/performance.md)
-- or a memory's full content.
-- NULL when the target no longer exists (the job then completes doing nothing).
-- PL/pgSQL, not SQL: Citus plans no query on a distributed table from a SQL function's parameters
CREATE OR REPLACE FUNCTION mnemo_internal.embed_target_text(p_tenant_id text, p_payload jsonb)
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN CASE p_payload ->> 'target'
        WHEN 'message' THEN (
            SELECT coalesce(m.name || ': ', '') || m.content FROM mnemo.messages AS m
            WHERE m.tenant_id = p_tenant_id AND m.message_id = (p_payload ->> 'message_id')::bigint
                AND m.created_at = (p_payload ->> 'created_at')::timestamptz)
        WHEN 'memory' THEN (
            SELECT mem.content_full FROM mnemo.memories AS mem
            WHERE mem.tenant_id = p_tenant_id AND mem.memory_id = (p_payload ->> 'memory_id')::bigint)
    END;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.embed_target_text(text, jsonb) IS
'Text that an embed job embeds (message content or memory content).';
