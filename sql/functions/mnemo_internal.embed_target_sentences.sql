-- mnemo_internal.embed_target_sentences(p_tenant_id, p_payload) -> text[]
-- The sentences an 'embed' job embeds besides its text (embed_target_text): a user
-- turn's, mnemo_internal.message_sentences of its role and content (without the
-- author's name: the compile matches the content's sentences). NULL for a memory, a
-- message of another role or of one sentence, or a target that no longer exists.
-- PL/pgSQL, not SQL: Citus plans no query on a distributed table from a SQL function's parameters
CREATE OR REPLACE FUNCTION mnemo_internal.embed_target_sentences(p_tenant_id text, p_payload jsonb)
RETURNS text[]
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_payload ->> 'target' IS DISTINCT FROM 'message' THEN
        RETURN NULL;
    END IF;
    RETURN (
        SELECT mnemo_internal.message_sentences(m.role, m.content) FROM mnemo.messages AS m
        WHERE m.tenant_id = p_tenant_id AND m.message_id = (p_payload ->> 'message_id')::bigint
            AND m.created_at = (p_payload ->> 'created_at')::timestamptz);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.embed_target_sentences(text, jsonb) IS
'Sentences an embed job embeds besides its text (a user turn''s); NULL when none.';
