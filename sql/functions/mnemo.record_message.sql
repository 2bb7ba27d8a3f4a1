-- mnemo.record_message(p_tenant_id, p_session_id, p_message, ...) -> bigint
-- Appends one OpenAI chat message to a session's history and returns its message id.
--   p_message: {"role": system|developer|user|assistant|tool, "content": text or
--   content parts, "name", "tool_calls" (assistant), "tool_call_id" (tool)}.
--   p_metadata: free JSON; its keys model, finish_reason, prompt_tokens,
--   completion_tokens, latency_ms also fill the columns of the same names.
-- The turn index is gapless per session under concurrency (the session row is the
-- counter, locked for the rest of the transaction). The token count (o200k_base) and
-- content hash are computed once, here. A tool output above the artifact threshold
-- keeps a bounded excerpt here and its full bytes in mnemo.artifacts. Secrets are
-- redacted from every string of the message, its metadata and tags (JSON keys too)
-- before anything is stored (metadata.redactions lists the kinds found).
-- Cleanup tags in an assistant's text (<mnemo:drop ids="obj:3"/> ..., see
-- plpy/mnemo_db/paging/tags.py) are stripped before it is stored (metadata.cleanup_tags
-- keeps them) and applied. The message joins the session's semantic objects
-- (mnemo_internal.paging_call 'message': segmentation, faults, structural waste).
-- Enqueues an 'embed' job and the session's 'extract' job. Bad input raises a MN0xx
-- error and writes nothing.
-- Writes: messages, sessions (counter), tool_calls, artifacts, jobs, and paging's
-- semantic_objects, object_residency, object_links, fidelity_log, fault_log.
CREATE OR REPLACE FUNCTION mnemo.record_message(
    p_tenant_id text,
    p_session_id uuid,
    p_message jsonb,
    p_sensitivity text DEFAULT 'none',
    p_tags text[] DEFAULT '{}',
    p_created_at timestamptz DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}'
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_role text;
    v_content jsonb;
    v_text text;
    v_parts jsonb;
    v_tool_calls jsonb;
    v_tool_call_id text;
    v_name text;
    v_call jsonb;
    v_bytes integer;
    v_turn integer;
    v_status text;
    v_message_id bigint;
    v_artifact_id bigint;
    v_stored jsonb;
    v_created_at timestamptz := coalesce(p_created_at, now());
    v_bad_key text;
    v_red jsonb;
    v_tags jsonb;
    v_tokens integer;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    -- Held until commit, from before the message id is drawn: the segments sweep
    -- (mnemo_internal.build_message_segments) waits for it, so it never seals past a
    -- lower id that is not committed yet.
    PERFORM pg_advisory_xact_lock_shared(hashtext('mnemo.message_segments'), hashtext(p_tenant_id));
    v_message_id := nextval('mnemo.messages_message_id_seq');
    IF p_session_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'session_id is required';
    END IF;
    IF p_sensitivity IS NULL OR p_sensitivity NOT IN ('none', 'low', 'high', 'secret') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown sensitivity %L', p_sensitivity),
            HINT = 'sensitivity is one of none, low, high, secret';
    END IF;
    IF p_tags IS NULL OR array_position(p_tags, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'tags must be an array of non-null strings';
    END IF;
    IF p_metadata IS NULL OR jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'metadata must be a JSON object';
    END IF;
    PERFORM mnemo_internal.checked_timestamp(p_created_at, 'created_at');
    PERFORM mnemo_internal.check_json_depth(p_message, 'message');
    PERFORM mnemo_internal.check_json_depth(p_metadata, 'metadata');
    SELECT k INTO v_bad_key FROM unnest(ARRAY['prompt_tokens', 'completion_tokens', 'latency_ms']) AS k
    WHERE p_metadata ? k AND (p_metadata ->> k) !~ '^[0-9]{1,9}$' LIMIT 1;
    IF v_bad_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('metadata.%s must be a non-negative integer', v_bad_key);
    END IF;

    -- Shape of the message ---------------------------------------------------------
    IF p_message IS NULL OR jsonb_typeof(p_message) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'message must be a JSON object',
            HINT = 'e.g. {"role": "user", "content": "hello"}';
    END IF;
    -- Secrets never reach a table: every string of the message, its metadata and
    -- tags is redacted before anything else looks at them (mnemo_internal.redact).
    v_red := mnemo_internal.redacted(p_tenant_id, jsonb_build_object('m', p_message, 'md', p_metadata, 'tags', p_tags));
    IF v_red IS NOT NULL THEN
        p_message := v_red #> '{value,m}';
        p_metadata := (v_red #> '{value,md}') || jsonb_build_object('redactions', v_red -> 'kinds');
        p_tags := ARRAY(SELECT jsonb_array_elements_text(v_red #> '{value,tags}'));
    END IF;
    SELECT k INTO v_bad_key FROM jsonb_object_keys(p_message) AS k
    WHERE k NOT IN ('role', 'content', 'name', 'tool_calls', 'tool_call_id', 'refusal') LIMIT 1;
    IF v_bad_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = format('unexpected message field %L', v_bad_key),
            HINT = 'A message has role, content, name, tool_calls (assistant) or tool_call_id (tool).';
    END IF;
    IF jsonb_typeof(p_message -> 'role') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'message.role must be a string';
    END IF;
    v_role := p_message ->> 'role';
    IF v_role NOT IN ('system', 'developer', 'user', 'assistant', 'tool') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN005', MESSAGE = format('unknown role %L', v_role),
            HINT = 'role is one of system, developer, user, assistant, tool';
    END IF;
    IF p_message ? 'name' AND jsonb_typeof(p_message -> 'name') <> 'string' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'message.name must be a string';
    END IF;
    v_name := p_message ->> 'name';
    -- OpenAI's assistant refusal: a string (or null); kept in metadata.refusal.
    IF coalesce(jsonb_typeof(p_message -> 'refusal'), 'null') NOT IN ('null', 'string')
        OR (v_role <> 'assistant' AND jsonb_typeof(p_message -> 'refusal') = 'string') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004',
            MESSAGE = 'message.refusal must be a string, and only on assistant messages';
    END IF;

    v_content := p_message -> 'content';
    CASE coalesce(jsonb_typeof(v_content), 'null')
        WHEN 'string' THEN
            v_text := v_content #>> '{}';
        WHEN 'array' THEN
            IF jsonb_array_length(v_content) = 0 OR EXISTS (
                SELECT FROM jsonb_array_elements(v_content) AS p (part)
                WHERE jsonb_typeof(p.part) <> 'object'
                    OR jsonb_typeof(p.part -> 'type') IS DISTINCT FROM 'string'
                    OR (p.part ->> 'type' = 'text' AND jsonb_typeof(p.part -> 'text') IS DISTINCT FROM 'string')) THEN
                RAISE EXCEPTION USING ERRCODE = 'MN004',
                    MESSAGE = 'message.content parts must be objects with a type (text parts need a string text)';
            END IF;
            v_parts := v_content;
            SELECT string_agg(p.part ->> 'text', E'\n') INTO v_text
            FROM jsonb_array_elements(v_content) AS p (part) WHERE p.part ->> 'type' = 'text';
        WHEN 'null' THEN
            v_text := NULL;
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'MN004',
                MESSAGE = format('message.content must be a string, an array of parts or null, not %s',
                    jsonb_typeof(v_content));
    END CASE;

    IF v_role = 'assistant' THEN
        v_tool_calls := p_message -> 'tool_calls';
        IF v_tool_calls IS NOT NULL AND jsonb_typeof(v_tool_calls) = 'null' THEN
            v_tool_calls := NULL;
        END IF;
        IF v_tool_calls IS NOT NULL THEN
            IF jsonb_typeof(v_tool_calls) <> 'array' OR jsonb_array_length(v_tool_calls) = 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'tool_calls must be a non-empty array';
            END IF;
            FOR v_call IN SELECT c FROM jsonb_array_elements(v_tool_calls) AS c LOOP
                IF jsonb_typeof(v_call -> 'id') IS DISTINCT FROM 'string' OR v_call ->> 'id' = ''
                    OR v_call ->> 'type' IS DISTINCT FROM 'function'
                    OR jsonb_typeof(v_call #> '{function,name}') IS DISTINCT FROM 'string'
                    OR jsonb_typeof(v_call #> '{function,arguments}') IS DISTINCT FROM 'string' THEN
                    RAISE EXCEPTION USING ERRCODE = 'MN004',
                        MESSAGE = format('malformed tool call %s', left(v_call::text, 200)),
                        HINT = 'Each call is {"id": "...", "type": "function", "function": {"name": "...", "arguments": "<JSON string>"}}';
                END IF;
            END LOOP;
        END IF;
        IF v_text IS NULL AND v_parts IS NULL AND v_tool_calls IS NULL
            AND p_message ->> 'refusal' IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004',
                MESSAGE = 'an assistant message needs content, tool_calls or a refusal';
        END IF;
    ELSIF p_message ? 'tool_calls' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = format('a %s message cannot carry tool_calls', v_role);
    ELSIF v_text IS NULL AND v_parts IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = format('a %s message needs content', v_role);
    END IF;

    IF v_role = 'tool' THEN
        IF jsonb_typeof(p_message -> 'tool_call_id') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'a tool message needs a string tool_call_id';
        END IF;
        v_tool_call_id := p_message ->> 'tool_call_id';
    ELSIF p_message ? 'tool_call_id' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = 'only tool messages carry tool_call_id';
    END IF;

    -- Cleanup tags (docs/design.md §Semantic objects and paging): stored without them, applied once the message is.
    IF v_role = 'assistant' AND v_parts IS NULL AND v_text LIKE '%<mnemo:%' THEN
        v_tags := mnemo_internal.paging_tags(v_text);
        IF v_tags IS NOT NULL THEN
            v_text := v_tags ->> 'text';
            p_metadata := p_metadata || jsonb_build_object('cleanup_tags', v_tags -> 'tags');
            v_tags := v_tags -> 'tags';
        END IF;
    END IF;

    v_bytes := coalesce(octet_length(v_text), 0);
    IF v_role <> 'tool' AND v_bytes > (mnemo_internal.setting('max_message_bytes'))::integer THEN
        RAISE EXCEPTION USING ERRCODE = 'MN007',
            MESSAGE = format('%s message content is %s bytes; the limit is %s', v_role, v_bytes,
                mnemo_internal.setting('max_message_bytes')),
            HINT = 'Large outputs belong in tool messages, which keep an excerpt and store the rest as an artifact.';
    END IF;
    IF v_role = 'tool' AND v_bytes > (mnemo_internal.setting('max_artifact_bytes'))::integer THEN
        RAISE EXCEPTION USING ERRCODE = 'MN007',
            MESSAGE = format('tool output is %s bytes; the limit is %s', v_bytes,
                mnemo_internal.setting('max_artifact_bytes'));
    END IF;

    -- The session row is the turn counter: the update locks it until commit, so
    -- concurrent writers queue here and turn indexes stay unique and gapless.
    UPDATE mnemo.sessions AS s
    SET turn_count = s.turn_count + 1,
        updated_at = now(),
        total_prompt_tokens = s.total_prompt_tokens + coalesce((p_metadata ->> 'prompt_tokens')::bigint, 0),
        total_completion_tokens = s.total_completion_tokens
            + coalesce((p_metadata ->> 'completion_tokens')::bigint, 0)
    WHERE s.tenant_id = p_tenant_id AND s.session_id = p_session_id AND s.status IN ('active', 'paused')
    RETURNING s.turn_count - 1 INTO v_turn;
    IF NOT FOUND THEN
        SELECT s.status INTO v_status FROM mnemo.sessions AS s
        WHERE s.tenant_id = p_tenant_id AND s.session_id = p_session_id;
        IF v_status IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN003',
                MESSAGE = format('unknown session %s for tenant %L', p_session_id, p_tenant_id),
                HINT = 'Open one with mnemo.start_session().';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'MN009', MESSAGE = format('session %s is %s', p_session_id, v_status);
    END IF;

    IF v_role = 'tool' THEN
        UPDATE mnemo.tool_calls AS tc SET result_message_id = v_message_id
        WHERE tc.tenant_id = p_tenant_id AND tc.session_id = p_session_id
            AND tc.tool_call_id = v_tool_call_id AND tc.result_message_id IS NULL;
        IF NOT FOUND THEN
            IF EXISTS (SELECT FROM mnemo.tool_calls AS tc WHERE tc.tenant_id = p_tenant_id
                AND tc.session_id = p_session_id AND tc.tool_call_id = v_tool_call_id) THEN
                RAISE EXCEPTION USING ERRCODE = 'MN012',
                    MESSAGE = format('tool call %L already has a result', v_tool_call_id);
            END IF;
            RAISE EXCEPTION USING ERRCODE = 'MN006',
                MESSAGE = format('no earlier assistant message in session %s issued tool call %L',
                    p_session_id, v_tool_call_id),
                HINT = 'Record the assistant message with its tool_calls before the tool results.';
        END IF;
        IF v_bytes > (mnemo_internal.setting('artifact_threshold_bytes'))::integer THEN
            v_artifact_id := nextval('mnemo.artifacts_artifact_id_seq');
            INSERT INTO mnemo.artifacts (
                tenant_id, artifact_id, session_id, message_id, kind, bytes, byte_size, sha256, meta)
            VALUES (
                p_tenant_id, v_artifact_id, p_session_id, v_message_id, 'tool_output',
                convert_to(v_text, 'UTF8'), v_bytes, sha256(convert_to(v_text, 'UTF8')),
                jsonb_build_object('tool_call_id', v_tool_call_id, 'name', v_name));
            v_text := mnemo_internal.excerpt(
                v_text, (mnemo_internal.setting('excerpt_bytes'))::integer, v_artifact_id);
            v_parts := NULL;  -- the excerpt replaces the parts as plain text
        END IF;
    END IF;

    v_stored := jsonb_strip_nulls(jsonb_build_object(
        'role', v_role,
        'content', coalesce(v_parts, to_jsonb(v_text)),
        'name', v_name,
        'tool_calls', v_tool_calls,
        'tool_call_id', v_tool_call_id));
    v_tokens := mnemo_internal.message_tokens(v_stored);

    INSERT INTO mnemo.messages (
        tenant_id, message_id, session_id, turn_index, role, content, content_parts, name,
        tool_calls, tool_call_id, token_count, content_hash, sensitivity, tags, artifact_id,
        model, finish_reason, prompt_tokens, completion_tokens, latency_ms, metadata, created_at)
    VALUES (
        p_tenant_id, v_message_id, p_session_id, v_turn, v_role, v_text, v_parts, v_name,
        v_tool_calls, v_tool_call_id, v_tokens,
        sha256(convert_to(v_stored::text, 'UTF8')), p_sensitivity, p_tags, v_artifact_id,
        p_metadata ->> 'model', p_metadata ->> 'finish_reason',
        (p_metadata ->> 'prompt_tokens')::integer, (p_metadata ->> 'completion_tokens')::integer,
        (p_metadata ->> 'latency_ms')::integer,
        p_metadata || jsonb_strip_nulls(jsonb_build_object('refusal', p_message ->> 'refusal')),
        v_created_at);

    IF v_tool_calls IS NOT NULL THEN
        BEGIN
            INSERT INTO mnemo.tool_calls (tenant_id, session_id, tool_call_id, message_id, turn_index, name)
            SELECT p_tenant_id, p_session_id, c ->> 'id', v_message_id, v_turn, c #>> '{function,name}'
            FROM jsonb_array_elements(v_tool_calls) AS c;
        EXCEPTION WHEN unique_violation THEN
            RAISE EXCEPTION USING ERRCODE = 'MN012',
                MESSAGE = 'a tool_call id in this message was already used in this session';
        END;
    END IF;

    PERFORM mnemo_internal.paging_call('message', p_tenant_id, p_session_id, jsonb_build_object('message',
        jsonb_build_object('message_id', v_message_id, 'role', v_role, 'content', v_text, 'tool_calls', v_tool_calls,
            'tool_call_id', v_tool_call_id, 'turn', v_turn, 'tokens', v_tokens, 'metadata', p_metadata),
        'tags', v_tags));

    IF coalesce(v_text, '') <> '' THEN
        PERFORM mnemo_internal.enqueue_job(p_tenant_id, 'embed',
            'message:' || v_message_id,
            jsonb_build_object('target', 'message', 'message_id', v_message_id, 'created_at', v_created_at));
        -- Memory formation, one queued job per session (mnemo_internal.extract).
        PERFORM mnemo_internal.enqueue_job(p_tenant_id, 'extract', 'session:' || p_session_id,
            jsonb_build_object('session_id', p_session_id));
    END IF;
    RETURN v_message_id;
END;
$$;

COMMENT ON FUNCTION mnemo.record_message(text, uuid, jsonb, text, text[], timestamptz, jsonb) IS
'Appends an OpenAI chat message to a session; returns its message id.';
