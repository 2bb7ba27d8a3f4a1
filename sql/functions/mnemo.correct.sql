-- mnemo.correct(p_tenant_id, p_memory_id, p_content, p_reason) -> bigint
-- Supersedes a memory with corrected content: a new memory of the same kind (and
-- fact subject/predicate) with provenance 'correction'; the old one keeps its row,
-- gets superseded_by and valid_to = now(), a 'supersedes' link and a version with
-- the reason. compile_context then sees the correction, and `as_of` an earlier time
-- still sees the original. Returns the new memory id. Secrets in the content and
-- the reason (kept in the version and the link) are redacted.
-- Bad input raises MN001, an unknown memory MN010; nothing is written then.
CREATE OR REPLACE FUNCTION mnemo.correct(
    p_tenant_id text,
    p_memory_id bigint,
    p_content text,
    p_reason text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_red jsonb;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    v_red := mnemo_internal.redacted(p_tenant_id, jsonb_build_object('c', p_content, 'r', p_reason));
    IF v_red IS NOT NULL THEN
        p_content := v_red #>> '{value,c}';
        p_reason := v_red #>> '{value,r}';
    END IF;
    IF p_content IS NULL OR btrim(p_content) = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'content is required';
    END IF;
    IF NOT EXISTS (SELECT FROM mnemo.memories AS m
        WHERE m.tenant_id = p_tenant_id AND m.memory_id = p_memory_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN010',
            MESSAGE = format('no memory %s for tenant %L', p_memory_id, p_tenant_id);
    END IF;
    RETURN mnemo_internal.form_memory(p_tenant_id, 'correct', jsonb_build_object(
        'memory_id', p_memory_id, 'content', p_content, 'reason', p_reason));
END;
$$;

COMMENT ON FUNCTION mnemo.correct(text, bigint, text, text) IS
'Supersedes a memory with corrected content (history kept); returns the new id.';
