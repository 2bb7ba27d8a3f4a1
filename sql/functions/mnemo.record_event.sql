-- mnemo.record_event(p_tenant_id, p_session_id, p_kind, p_content, ...) -> jsonb
-- The event surface (docs/design.md §Surfaces) over the same tables as record_message:
--   message      {"text"}; actor.type human -> user, agent -> assistant, system -> system
--   tool_call    {"tool", "arguments" (object or JSON string), "id" (optional)}
--   tool_result  {"tool", "text" or "excerpt_text", "tool_call_id" (optional: without
--                one, the matching assistant tool call is recorded first, so the
--                history stays a valid OpenAI conversation), other fields = arguments}
--   decision     {"decision", "rationale"[], "alternatives"[], "constraints"[], "consequences"[]}
--   task_update  {"title", "status" (open|doing|done|dropped), "due_at"}
--   artifact     {"text" or "base64", "media_type", "meta"}
-- Returns {"event_id", and message_id / tool_call_id / memory_id / artifact_id as
-- they apply}. Bad input raises MN001/MN004 (and the errors of record_message).
CREATE OR REPLACE FUNCTION mnemo.record_event(
    p_tenant_id text,
    p_session_id uuid,
    p_kind text,
    p_content jsonb,
    p_actor jsonb DEFAULT '{}',
    p_sensitivity text DEFAULT 'none',
    p_tags text[] DEFAULT '{}',
    p_refs text[] DEFAULT '{}',
    p_created_at timestamptz DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_meta jsonb := jsonb_build_object('event_kind', p_kind, 'actor', coalesce(p_actor, '{}'),
        'refs', to_jsonb(coalesce(p_refs, '{}')));
    v_id bigint;
    v_call_id text;
    v_args jsonb;
    v_text text;
    v_memory_id bigint;
    v_due_at timestamptz;
    v_red jsonb;
    v_bytes bytea;
    v_kinds text[];
    v_rationale text[];
    v_alternatives text[];
    v_constraints text[];
    v_consequences text[];
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    IF p_content IS NULL OR jsonb_typeof(p_content) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'event content must be a JSON object';
    END IF;
    -- Checked here for every kind (decisions and tasks never reach record_message).
    IF p_sensitivity IS NULL OR p_sensitivity NOT IN ('none', 'low', 'high', 'secret') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown sensitivity %L', p_sensitivity),
            HINT = 'sensitivity is one of none, low, high, secret';
    END IF;
    IF p_tags IS NULL OR array_position(p_tags, NULL) IS NOT NULL
        OR p_refs IS NULL OR array_position(p_refs, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'tags and refs must be arrays of non-null strings';
    END IF;
    PERFORM mnemo_internal.checked_timestamp(p_created_at, 'created_at');
    PERFORM mnemo_internal.check_json_depth(p_content, 'content');
    PERFORM mnemo_internal.check_json_depth(p_actor, 'actor');
    -- Typed payloads (decisions, tasks), actor, tags and refs are stored from the
    -- arguments directly: redact them here as record_message and insert_memory
    -- redact what they store. An artifact's base64 is redacted once decoded, below.
    v_red := mnemo_internal.redacted(p_tenant_id, jsonb_build_object(
        'c', CASE WHEN p_kind = 'artifact' THEN p_content - 'base64' ELSE p_content END,
        'meta', v_meta, 'tags', p_tags));
    IF v_red IS NOT NULL THEN
        p_content := (v_red #> '{value,c}') || CASE WHEN p_kind = 'artifact'
            THEN jsonb_strip_nulls(jsonb_build_object('base64', p_content -> 'base64')) ELSE '{}' END;
        v_meta := v_red #> '{value,meta}';
        p_tags := CASE WHEN p_tags IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(v_red #> '{value,tags}')) END;
        p_refs := ARRAY(SELECT jsonb_array_elements_text(v_meta -> 'refs'));
    END IF;
    IF NOT EXISTS (SELECT FROM mnemo.sessions AS s
        WHERE s.tenant_id = p_tenant_id AND s.session_id = p_session_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN003', MESSAGE = format('unknown session %s', p_session_id);
    END IF;
    CASE p_kind
    WHEN 'message' THEN
        v_id := mnemo.record_message(p_tenant_id, p_session_id, jsonb_build_object(
            'role', CASE coalesce(p_actor ->> 'type', 'human')
                WHEN 'human' THEN 'user' WHEN 'agent' THEN 'assistant' WHEN 'system' THEN 'system'
                ELSE 'user' END,
            'content', p_content -> 'text'), p_sensitivity, p_tags, p_created_at, v_meta);
        RETURN jsonb_build_object('event_id', 'msg_' || v_id, 'message_id', v_id);
    WHEN 'tool_call', 'tool_result' THEN
        IF jsonb_typeof(p_content -> 'tool') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = format('a %s event needs a string "tool"', p_kind);
        END IF;
        v_call_id := coalesce(p_content ->> CASE p_kind WHEN 'tool_call' THEN 'id' ELSE 'tool_call_id' END, '');
        IF p_kind = 'tool_call' OR v_call_id = '' THEN
            IF v_call_id = '' THEN
                v_call_id := 'call_evt_' || nextval('mnemo.messages_message_id_seq');
            END IF;
            v_args := CASE WHEN p_kind = 'tool_call' THEN coalesce(p_content -> 'arguments', '{}')
                ELSE p_content - ARRAY['tool', 'text', 'excerpt_text', 'tool_call_id', 'truncated', 'artifact_id'] END;
            v_id := mnemo.record_message(p_tenant_id, p_session_id, jsonb_build_object(
                'role', 'assistant', 'content', NULL, 'tool_calls', jsonb_build_array(jsonb_build_object(
                    'id', v_call_id, 'type', 'function', 'function', jsonb_build_object(
                        'name', p_content ->> 'tool',
                        'arguments', CASE jsonb_typeof(v_args) WHEN 'string' THEN v_args #>> '{}'
                            ELSE v_args::text END)))),
                p_sensitivity, p_tags, p_created_at, v_meta);
            IF p_kind = 'tool_call' THEN
                RETURN jsonb_build_object('event_id', 'msg_' || v_id, 'message_id', v_id, 'tool_call_id', v_call_id);
            END IF;
        END IF;
        v_text := coalesce(p_content ->> 'text', p_content ->> 'excerpt_text');
        IF v_text IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'a tool_result event needs "text" or "excerpt_text"';
        END IF;
        v_id := mnemo.record_message(p_tenant_id, p_session_id, jsonb_build_object(
            'role', 'tool', 'tool_call_id', v_call_id, 'content', v_text),
            p_sensitivity, p_tags, p_created_at, v_meta);
        RETURN jsonb_strip_nulls(jsonb_build_object('event_id', 'msg_' || v_id, 'message_id', v_id,
            'tool_call_id', v_call_id, 'artifact_id', (
                SELECT m.artifact_id FROM mnemo.messages AS m
                WHERE m.tenant_id = p_tenant_id AND m.session_id = p_session_id AND m.message_id = v_id)));
    WHEN 'decision' THEN
        IF jsonb_typeof(p_content -> 'decision') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'a decision event needs a string "decision"';
        END IF;
        v_text := (p_content ->> 'decision') || coalesce(E'\nRationale: ' || (
            SELECT string_agg(r, '; ') FROM jsonb_array_elements_text(p_content -> 'rationale') AS r), '')
            || coalesce(E'\nAlternatives: ' || (
            SELECT string_agg(a, '; ') FROM jsonb_array_elements_text(p_content -> 'alternatives') AS a), '');
        v_memory_id := mnemo_internal.insert_memory(p_tenant_id, p_session_id, 'decision', v_text,
            'user_stated', v_meta, '{}', p_sensitivity, p_tags);
        -- INSERT ... VALUES, the lists computed first: Citus does an INSERT ... SELECT
        -- (of no table) as COPY, which row-level security refuses, and refuses a
        -- subquery in VALUES
        v_rationale := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_content -> 'rationale', '[]')));
        v_alternatives := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_content -> 'alternatives', '[]')));
        v_constraints := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_content -> 'constraints', '[]')));
        v_consequences := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_content -> 'consequences', '[]')));
        INSERT INTO mnemo.memory_decisions (tenant_id, memory_id, decision, rationale, alternatives,
            constraints, consequences, refs)
        VALUES (p_tenant_id, v_memory_id, p_content ->> 'decision', v_rationale, v_alternatives, v_constraints,
            v_consequences, coalesce(p_refs, '{}'));
        RETURN jsonb_build_object('event_id', 'mem_' || v_memory_id, 'memory_id', v_memory_id);
    WHEN 'task_update' THEN
        IF jsonb_typeof(p_content -> 'title') IS DISTINCT FROM 'string'
            OR coalesce(p_content ->> 'status', 'open') NOT IN ('open', 'doing', 'done', 'dropped') THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004',
                MESSAGE = 'a task_update event needs a string "title" and a status of open, doing, done or dropped';
        END IF;
        -- a due date outside the API's range is malformed content, as one that is no date
        BEGIN
            v_due_at := mnemo_internal.checked_timestamp(p_content ->> 'due_at', 'due_at');
        EXCEPTION WHEN SQLSTATE 'MN001' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'malformed event content: ' || SQLERRM;
        END;
        v_memory_id := mnemo_internal.insert_memory(p_tenant_id, p_session_id, 'task',
            format('Task (%s): %s', coalesce(p_content ->> 'status', 'open'), p_content ->> 'title'),
            'user_stated', v_meta, '{}', p_sensitivity, p_tags);
        INSERT INTO mnemo.memory_tasks (tenant_id, memory_id, title, status, due_at)
        VALUES (p_tenant_id, v_memory_id, p_content ->> 'title', coalesce(p_content ->> 'status', 'open'),
            v_due_at);
        RETURN jsonb_build_object('event_id', 'mem_' || v_memory_id, 'memory_id', v_memory_id);
    WHEN 'artifact' THEN
        v_bytes := CASE WHEN p_content ? 'base64' THEN decode(p_content ->> 'base64', 'base64')
            ELSE convert_to(p_content ->> 'text', 'UTF8') END;
        IF v_bytes IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'an artifact event needs "text" or "base64"';
        END IF;
        -- The text was redacted with p_content; decoded base64 is redacted as bytes.
        IF p_content ? 'base64' AND mnemo_internal.redaction_enabled(p_tenant_id) THEN
            SELECT r.bytes, r.kinds INTO v_bytes, v_kinds FROM mnemo_internal.redact(v_bytes) AS r;
        END IF;
        v_id := nextval('mnemo.artifacts_artifact_id_seq');
        INSERT INTO mnemo.artifacts (tenant_id, artifact_id, session_id, kind, media_type, bytes, byte_size, sha256, meta)
        VALUES (p_tenant_id, v_id, p_session_id, 'blob',
            coalesce(p_content ->> 'media_type', 'application/octet-stream'), v_bytes, octet_length(v_bytes),
            sha256(v_bytes), coalesce(p_content -> 'meta', '{}')
                || CASE WHEN cardinality(v_kinds) > 0 THEN jsonb_build_object('redactions', v_kinds) ELSE '{}' END);
        RETURN jsonb_build_object('event_id', 'art_' || v_id, 'artifact_id', v_id);
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown event kind %L', p_kind),
            HINT = 'kind is one of message, tool_call, tool_result, decision, task_update, artifact';
    END CASE;
EXCEPTION
    WHEN invalid_datetime_format OR datetime_field_overflow OR invalid_parameter_value THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'malformed event content: ' || SQLERRM;
END;
$$;

COMMENT ON FUNCTION mnemo.record_event(text, uuid, text, jsonb, jsonb, text, text[], text[], timestamptz) IS
'Records a seed-004 event (message, tool call/result, decision, task, artifact).';
