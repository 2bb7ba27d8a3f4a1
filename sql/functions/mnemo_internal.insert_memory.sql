-- mnemo_internal.insert_memory(p_tenant_id, p_session_id, p_kind, p_content, ...) -> bigint
-- Stores one memory at full fidelity with a one-line stub (lower fidelities and
-- declared losses are filled by the summarisation jobs) and queues its embedding.
-- Callers validate their input first. Writes: memories, jobs.
CREATE OR REPLACE FUNCTION mnemo_internal.insert_memory(
    p_tenant_id text,
    p_session_id uuid,
    p_kind text,
    p_content text,
    p_provenance_type text DEFAULT 'system_inferred',
    p_provenance jsonb DEFAULT '{}',
    p_source_message_ids bigint[] DEFAULT '{}',
    p_sensitivity text DEFAULT 'none',
    p_tags text[] DEFAULT '{}'
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_memory_id bigint;
    v_stub text := left(split_part(btrim(p_content), E'\n', 1), 160);
BEGIN
    INSERT INTO mnemo.memories (
        tenant_id, session_id, kind, content_full, content_stub, tokens_full, tokens_stub,
        provenance_type, provenance, source_message_ids, sensitivity, tags, content_hash)
    VALUES (
        p_tenant_id, p_session_id, p_kind, p_content, v_stub, mnemo.count_tokens(p_content),
        mnemo.count_tokens(v_stub), p_provenance_type, p_provenance, p_source_message_ids,
        p_sensitivity, p_tags,
        sha256(convert_to(lower(regexp_replace(btrim(p_content), '\s+', ' ', 'g')), 'UTF8')))
    RETURNING memory_id INTO v_memory_id;
    PERFORM mnemo_internal.enqueue_job(p_tenant_id, 'embed', 'memory:' || v_memory_id,
        jsonb_build_object('target', 'memory', 'memory_id', v_memory_id));
    RETURN v_memory_id;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.insert_memory(text, uuid, text, text, text, jsonb, bigint[], text, text[]) IS
'Stores a memory at full fidelity with its stub and queues its embedding.';
