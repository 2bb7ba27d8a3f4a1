-- mnemo_internal.insert_memory(p_tenant_id, p_session_id, p_kind, p_content, ...) -> bigint
-- Stores one memory at full fidelity with a one-line stub (lower fidelities and
-- declared losses are filled by the summarisation jobs). The one insert path for
-- memories: record_event, remember/correct and the extract job all come here.
-- Secrets in the content are redacted first (when the tenant redacts; the memory's
-- metadata.redactions then lists what was found).
--   p_options: scope, tier, confidence, created_at / valid_from / valid_to /
--   expires_at, source_key, key_entities (array), metadata (object), superseded_by,
--   embedding (pgvector text; then no embed job is queued and the caller counts the
--   memory into mnemo.lexicon, see formation.py), is_pinned.
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
    p_tags text[] DEFAULT '{}',
    p_options jsonb DEFAULT '{}'
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_memory_id bigint;
    v_content text := p_content;
    v_stub text;
    v_red jsonb;
    v_meta jsonb := coalesce(p_options -> 'metadata', '{}');
    v_at timestamptz := coalesce((p_options ->> 'created_at')::timestamptz, now());
    -- computed here, not in VALUES: Citus refuses subqueries in an INSERT ... VALUES
    v_key_entities text [] := coalesce(ARRAY(SELECT jsonb_array_elements_text(p_options -> 'key_entities')), '{}');
BEGIN
    v_red := mnemo_internal.redacted(p_tenant_id, to_jsonb(p_content));
    IF v_red IS NOT NULL THEN
        v_content := v_red ->> 'value';
        v_meta := v_meta || jsonb_build_object('redactions', v_red -> 'kinds');
    END IF;
    v_stub := mnemo_internal.memory_stub(v_content);
    INSERT INTO mnemo.memories (
        tenant_id, session_id, kind, content_full, content_stub, tokens_full, tokens_stub,
        provenance_type, provenance, source_message_ids, sensitivity, tags, content_hash,
        scope, tier, confidence, created_at, updated_at, valid_from, valid_to, expires_at,
        source_key, key_entities, metadata, superseded_by, embedding, is_pinned)
    VALUES (
        p_tenant_id, p_session_id, p_kind, v_content, v_stub, mnemo.count_tokens(v_content),
        mnemo.count_tokens(v_stub), p_provenance_type, p_provenance, p_source_message_ids,
        p_sensitivity, p_tags, mnemo_internal.content_hash(v_content),
        coalesce(p_options ->> 'scope', 'local'), coalesce(p_options ->> 'tier', 'session'),
        coalesce((p_options ->> 'confidence')::real, 0.5), v_at, now(),
        coalesce((p_options ->> 'valid_from')::timestamptz, v_at),
        (p_options ->> 'valid_to')::timestamptz, (p_options ->> 'expires_at')::timestamptz,
        p_options ->> 'source_key',
        v_key_entities,
        v_meta, (p_options ->> 'superseded_by')::bigint, (p_options ->> 'embedding')::vector,
        coalesce((p_options ->> 'is_pinned')::boolean, false))
    RETURNING memory_id INTO v_memory_id;
    IF p_options ->> 'embedding' IS NULL THEN
        PERFORM mnemo_internal.enqueue_job(p_tenant_id, 'embed', 'memory:' || v_memory_id,
            jsonb_build_object('target', 'memory', 'memory_id', v_memory_id));
    END IF;
    RETURN v_memory_id;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.insert_memory(text, uuid, text, text, text, jsonb, bigint[], text, text[], jsonb) IS
'Stores a memory at full fidelity with its stub (secrets redacted) and queues its embedding.';
