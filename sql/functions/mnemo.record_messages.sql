-- mnemo.record_messages(p_tenant_id, p_session_id, p_messages, ...) -> bigint[]
-- Appends OpenAI chat messages to a session's history, in order, in one call, and
-- returns their message ids in that order: a whole turn (an assistant message and the
-- tool results that answer it) or an importer's batch. mnemo.record_message is this
-- function for one message.
--   p_messages: the messages, each {"role": system|developer|user|assistant|tool,
--   "content": text or content parts, "name", "tool_calls" (assistant),
--   "tool_call_id" (tool: a call of an earlier message, in this batch or before)}.
--   p_sensitivity, p_tags: of every message of the batch.
--   p_created_at: each message's time (NULL, or a NULL element: now()).
--   p_metadata: each message's metadata (NULL: {} for each), free JSON objects; their
--   keys model, finish_reason, prompt_tokens, completion_tokens, latency_ms also fill
--   the columns of the same names.
-- Each message is checked, redacted and stored as a single call would store it: the
-- turn index is gapless per session under concurrency (the session row is the
-- counter, locked for the rest of the transaction; the batch takes consecutive
-- turns). The token count (o200k_base), the content's line tokens and the content
-- hash are computed once, here. A tool output above the artifact threshold keeps a
-- bounded excerpt here and its full bytes in mnemo.artifacts. Secrets are redacted
-- from every string of the message, its metadata and tags (JSON keys too) before
-- anything is stored (metadata.redactions lists the kinds found in that message).
-- Cleanup tags in an assistant's text (<mnemo:drop ids="obj:3"/> ..., see
-- plpy/mnemo_db/paging/tags.py) are stripped before it is stored (metadata.cleanup_tags
-- keeps them) and applied. Each message joins the session's semantic objects
-- (mnemo_internal.paging_call 'messages': segmentation, faults, structural waste), in
-- order. Enqueues an 'embed' job per message with text and the session's 'extract'
-- job. What a batch shares is done once: the tenant and session checks, the lock, the
-- settings, one call each for redaction, token counts and paging, one INSERT of the
-- messages and one of their tool calls.
-- All or nothing: bad input in any message raises a MN0xx error and writes nothing;
-- in a batch of several, the error's message starts with "message <i> of <n>: ". An
-- empty array records nothing and returns '{}' (MN003 when the session does not exist).
-- Raises MN001 (arguments: no session id, a sensitivity, tags, metadata, created_at,
-- messages not a one-dimensional array, p_created_at or p_metadata not one per
-- message), MN002 (tenant), MN003 (session), MN004 (a message's shape), MN005 (role),
-- MN006 (a tool result without its call), MN007 (size), MN008 (access), MN009
-- (session closed), MN012 (a tool call id used twice, a second result).
-- Writes: messages, sessions (counter), tool_calls, artifacts, jobs, and paging's
-- semantic_objects, object_residency, object_links, fidelity_log, fault_log.
CREATE OR REPLACE FUNCTION mnemo.record_messages(
    p_tenant_id text,
    p_session_id uuid,
    p_messages jsonb[],
    p_sensitivity text DEFAULT 'none',
    p_tags text[] DEFAULT '{}',
    p_created_at timestamptz[] DEFAULT NULL,
    p_metadata jsonb[] DEFAULT NULL
) RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_n integer;
    v_at text := '';  -- which message an error is about, in a batch of several
    v_ids bigint [] := '{}';
    v_result_id bigint;
    v_call_id text;
    v_prompt_tokens bigint := 0;
    v_completion_tokens bigint := 0;
    v_any_calls boolean := false;
    v_any_text boolean := false;
    v_paging jsonb := '[]';
    v_first_turn integer;
    v_turn integer;
    v_status text;
    -- one message, while it is checked
    v_message jsonb;
    v_metadata jsonb;
    v_role text;
    v_content jsonb;
    v_text text;
    v_parts jsonb;
    v_tool_calls jsonb;
    v_tool_call_id text;
    v_call jsonb;
    v_tags text[];
    v_created timestamptz;
    v_bytes integer;
    v_bad_key text;
    v_cleanup jsonb;
    v_artifact_id bigint;
    -- each message of the batch, as stored
    v_red jsonb [] := '{}';  -- what redaction reads, then what it found (NULL: nothing)
    v_metas jsonb [] := '{}';
    v_tag_lists jsonb [] := '{}';
    v_roles text [] := '{}';
    v_texts text [] := '{}';
    v_parts_of jsonb [] := '{}';
    v_names text [] := '{}';
    v_calls_of jsonb [] := '{}';
    v_call_ids text [] := '{}';
    v_refusals text [] := '{}';
    v_cleanups jsonb [] := '{}';
    v_artifacts bigint [] := '{}';
    v_stored jsonb [] := '{}';
    v_tokens integer [];
    v_line_tokens integer [];
    -- the settings, read once
    v_max_message_bytes integer;
    v_max_artifact_bytes integer;
    v_artifact_threshold integer;
    i integer;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    IF p_messages IS NULL OR array_ndims(p_messages) > 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'messages must be a one-dimensional array of messages';
    END IF;
    v_n := cardinality(p_messages);
    IF p_created_at IS NOT NULL AND (array_ndims(p_created_at) > 1 OR cardinality(p_created_at) <> v_n) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'created_at must be NULL or one timestamp per message';
    END IF;
    IF p_metadata IS NOT NULL AND (array_ndims(p_metadata) > 1 OR cardinality(p_metadata) <> v_n) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'metadata must be NULL or one JSON object per message';
    END IF;
    -- Subscripts from 1 (an array literal may start elsewhere: '[0:1]={...}').
    IF array_lower(p_messages, 1) <> 1 THEN
        p_messages := ARRAY(SELECT m FROM unnest(p_messages) WITH ORDINALITY AS x (m, k) ORDER BY k);
    END IF;
    IF array_lower(p_created_at, 1) <> 1 THEN
        p_created_at := ARRAY(SELECT c FROM unnest(p_created_at) WITH ORDINALITY AS x (c, k) ORDER BY k);
    END IF;
    IF array_lower(p_metadata, 1) <> 1 THEN
        p_metadata := ARRAY(SELECT d FROM unnest(p_metadata) WITH ORDINALITY AS x (d, k) ORDER BY k);
    END IF;
    -- Drawn in order, with the tenant's sealing lock held until commit (the segments
    -- sweep waits for it, so it never seals past a lower id not committed yet); on
    -- Citus on the node that holds the tenant's shards, whichever node runs this.
    v_ids := mnemo_internal.message_ids(p_tenant_id, v_n);
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

    -- Arguments of each message, before anything looks inside them ------------------
    FOR i IN 1 .. v_n LOOP
        v_at := CASE WHEN v_n > 1 THEN format('message %s of %s: ', i, v_n) ELSE '' END;
        v_metadata := CASE WHEN p_metadata IS NULL THEN '{}' ELSE p_metadata[i] END;
        IF v_metadata IS NULL OR jsonb_typeof(v_metadata) <> 'object' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = v_at || 'metadata must be a JSON object';
        END IF;
        PERFORM mnemo_internal.checked_timestamp(p_created_at[i], v_at || 'created_at');
        PERFORM mnemo_internal.check_json_depth(p_messages[i], v_at || 'message');
        PERFORM mnemo_internal.check_json_depth(v_metadata, v_at || 'metadata');
        SELECT k INTO v_bad_key FROM unnest(ARRAY['prompt_tokens', 'completion_tokens', 'latency_ms']) AS k
        WHERE v_metadata ? k AND (v_metadata ->> k) !~ '^[0-9]{1,9}$' LIMIT 1;
        IF v_bad_key IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN001',
                MESSAGE = format('%smetadata.%s must be a non-negative integer', v_at, v_bad_key);
        END IF;
        IF p_messages[i] IS NULL OR jsonb_typeof(p_messages[i]) <> 'object' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = v_at || 'message must be a JSON object',
                HINT = 'e.g. {"role": "user", "content": "hello"}';
        END IF;
        v_metas := array_append(v_metas, v_metadata);
        v_red := array_append(v_red, jsonb_build_object('m', p_messages[i], 'md', v_metadata, 'tags', p_tags));
    END LOOP;

    -- Secrets never reach a table: every string of each message, its metadata and
    -- tags is redacted before anything else looks at them (mnemo_internal.redact),
    -- each message on its own, all in one call.
    v_red := mnemo_internal.redacted(p_tenant_id, v_red);
    v_max_message_bytes := (mnemo_internal.setting('max_message_bytes'))::integer;
    v_max_artifact_bytes := (mnemo_internal.setting('max_artifact_bytes'))::integer;

    -- Shape of each message ---------------------------------------------------------
    FOR i IN 1 .. v_n LOOP
        v_at := CASE WHEN v_n > 1 THEN format('message %s of %s: ', i, v_n) ELSE '' END;
        v_message := p_messages[i];
        v_metadata := v_metas[i];
        v_tag_lists := array_append(v_tag_lists, to_jsonb(p_tags));
        IF v_red[i] IS NOT NULL THEN
            v_message := v_red[i] #> '{value,m}';
            v_metadata := (v_red[i] #> '{value,md}') || jsonb_build_object('redactions', v_red[i] -> 'kinds');
            v_tag_lists[i] := v_red[i] #> '{value,tags}';
        END IF;
        SELECT k INTO v_bad_key FROM jsonb_object_keys(v_message) AS k
        WHERE k NOT IN ('role', 'content', 'name', 'tool_calls', 'tool_call_id', 'refusal') LIMIT 1;
        IF v_bad_key IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = format('%sunexpected message field %L', v_at, v_bad_key),
                HINT = 'A message has role, content, name, tool_calls (assistant) or tool_call_id (tool).';
        END IF;
        IF jsonb_typeof(v_message -> 'role') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = v_at || 'message.role must be a string';
        END IF;
        v_role := v_message ->> 'role';
        IF v_role NOT IN ('system', 'developer', 'user', 'assistant', 'tool') THEN
            RAISE EXCEPTION USING ERRCODE = 'MN005', MESSAGE = format('%sunknown role %L', v_at, v_role),
                HINT = 'role is one of system, developer, user, assistant, tool';
        END IF;
        IF v_message ? 'name' AND jsonb_typeof(v_message -> 'name') <> 'string' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = v_at || 'message.name must be a string';
        END IF;
        -- OpenAI's assistant refusal: a string (or null); kept in metadata.refusal.
        IF coalesce(jsonb_typeof(v_message -> 'refusal'), 'null') NOT IN ('null', 'string')
            OR (v_role <> 'assistant' AND jsonb_typeof(v_message -> 'refusal') = 'string') THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004',
                MESSAGE = v_at || 'message.refusal must be a string, and only on assistant messages';
        END IF;

        v_content := v_message -> 'content';
        v_parts := NULL;
        CASE coalesce(jsonb_typeof(v_content), 'null')
            WHEN 'string' THEN
                v_text := v_content #>> '{}';
            WHEN 'array' THEN
                IF jsonb_array_length(v_content) = 0 OR EXISTS (
                    SELECT FROM jsonb_array_elements(v_content) AS p (part)
                    WHERE jsonb_typeof(p.part) <> 'object'
                        OR jsonb_typeof(p.part -> 'type') IS DISTINCT FROM 'string'
                        OR (p.part ->> 'type' = 'text' AND jsonb_typeof(p.part -> 'text') IS DISTINCT FROM 'string')) THEN
                    RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = v_at
                        || 'message.content parts must be objects with a type (text parts need a string text)';
                END IF;
                v_parts := v_content;
                SELECT string_agg(p.part ->> 'text', E'\n') INTO v_text
                FROM jsonb_array_elements(v_content) AS p (part) WHERE p.part ->> 'type' = 'text';
            WHEN 'null' THEN
                v_text := NULL;
            ELSE
                RAISE EXCEPTION USING ERRCODE = 'MN004',
                    MESSAGE = format('%smessage.content must be a string, an array of parts or null, not %s',
                        v_at, jsonb_typeof(v_content));
        END CASE;

        v_tool_calls := NULL;
        IF v_role = 'assistant' THEN
            v_tool_calls := v_message -> 'tool_calls';
            IF v_tool_calls IS NOT NULL AND jsonb_typeof(v_tool_calls) = 'null' THEN
                v_tool_calls := NULL;
            END IF;
            IF v_tool_calls IS NOT NULL THEN
                IF jsonb_typeof(v_tool_calls) <> 'array' OR jsonb_array_length(v_tool_calls) = 0 THEN
                    RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = v_at || 'tool_calls must be a non-empty array';
                END IF;
                FOR v_call IN SELECT c FROM jsonb_array_elements(v_tool_calls) AS c LOOP
                    IF jsonb_typeof(v_call -> 'id') IS DISTINCT FROM 'string' OR v_call ->> 'id' = ''
                        OR v_call ->> 'type' IS DISTINCT FROM 'function'
                        OR jsonb_typeof(v_call #> '{function,name}') IS DISTINCT FROM 'string'
                        OR jsonb_typeof(v_call #> '{function,arguments}') IS DISTINCT FROM 'string' THEN
                        RAISE EXCEPTION USING ERRCODE = 'MN004',
                            MESSAGE = format('%smalformed tool call %s', v_at, left(v_call::text, 200)),
                            HINT = 'Each call is {"id": "...", "type": "function", "function": {"name": "...", "arguments": "<JSON string>"}}';
                    END IF;
                END LOOP;
            END IF;
            IF v_text IS NULL AND v_parts IS NULL AND v_tool_calls IS NULL
                AND v_message ->> 'refusal' IS NULL THEN
                RAISE EXCEPTION USING ERRCODE = 'MN004',
                    MESSAGE = v_at || 'an assistant message needs content, tool_calls or a refusal';
            END IF;
        ELSIF v_message ? 'tool_calls' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = format('%sa %s message cannot carry tool_calls', v_at, v_role);
        ELSIF v_text IS NULL AND v_parts IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = format('%sa %s message needs content', v_at, v_role);
        END IF;

        v_tool_call_id := NULL;
        IF v_role = 'tool' THEN
            IF jsonb_typeof(v_message -> 'tool_call_id') IS DISTINCT FROM 'string' THEN
                RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = v_at || 'a tool message needs a string tool_call_id';
            END IF;
            v_tool_call_id := v_message ->> 'tool_call_id';
        ELSIF v_message ? 'tool_call_id' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN004', MESSAGE = v_at || 'only tool messages carry tool_call_id';
        END IF;

        -- Cleanup tags (docs/design.md §Semantic objects and paging): stored without them, applied once the message is.
        v_cleanup := NULL;
        IF v_role = 'assistant' AND v_parts IS NULL AND v_text LIKE '%<mnemo:%' THEN
            v_cleanup := mnemo_internal.paging_tags(v_text);
            IF v_cleanup IS NOT NULL THEN
                v_text := v_cleanup ->> 'text';
                v_metadata := v_metadata || jsonb_build_object('cleanup_tags', v_cleanup -> 'tags');
                v_cleanup := v_cleanup -> 'tags';
            END IF;
        END IF;

        v_bytes := coalesce(octet_length(v_text), 0);
        IF v_role <> 'tool' AND v_bytes > v_max_message_bytes THEN
            RAISE EXCEPTION USING ERRCODE = 'MN007',
                MESSAGE = format('%s%s message content is %s bytes; the limit is %s', v_at, v_role, v_bytes,
                    v_max_message_bytes),
                HINT = 'Large outputs belong in tool messages, which keep an excerpt and store the rest as an artifact.';
        END IF;
        IF v_role = 'tool' AND v_bytes > v_max_artifact_bytes THEN
            RAISE EXCEPTION USING ERRCODE = 'MN007',
                MESSAGE = format('%stool output is %s bytes; the limit is %s', v_at, v_bytes, v_max_artifact_bytes);
        END IF;
        v_metas[i] := v_metadata;
        v_prompt_tokens := v_prompt_tokens + coalesce((v_metadata ->> 'prompt_tokens')::bigint, 0);
        v_completion_tokens := v_completion_tokens + coalesce((v_metadata ->> 'completion_tokens')::bigint, 0);
        v_any_calls := v_any_calls OR v_tool_calls IS NOT NULL;
        v_roles := array_append(v_roles, v_role);
        v_texts := array_append(v_texts, v_text);
        v_parts_of := array_append(v_parts_of, v_parts);
        v_names := array_append(v_names, (v_message ->> 'name'));
        v_calls_of := array_append(v_calls_of, v_tool_calls);
        v_call_ids := array_append(v_call_ids, v_tool_call_id);
        v_refusals := array_append(v_refusals, (v_message ->> 'refusal'));
        v_cleanups := array_append(v_cleanups, v_cleanup);
        v_artifacts := array_append(v_artifacts, NULL::bigint);
    END LOOP;
    v_at := '';

    -- The session row is the turn counter: the update locks it until commit, so
    -- concurrent writers queue here and turn indexes stay unique and gapless.
    UPDATE mnemo.sessions AS s
    SET turn_count = s.turn_count + v_n,
        updated_at = now(),
        total_prompt_tokens = s.total_prompt_tokens + v_prompt_tokens,
        total_completion_tokens = s.total_completion_tokens + v_completion_tokens
    WHERE s.tenant_id = p_tenant_id AND s.session_id = p_session_id AND s.status IN ('active', 'paused')
        AND v_n > 0
    RETURNING s.turn_count - v_n INTO v_first_turn;
    IF NOT FOUND THEN
        SELECT s.status INTO v_status FROM mnemo.sessions AS s
        WHERE s.tenant_id = p_tenant_id AND s.session_id = p_session_id;
        IF v_status IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN003',
                MESSAGE = format('unknown session %s for tenant %L', p_session_id, p_tenant_id),
                HINT = 'Open one with mnemo.start_session().';
        END IF;
        IF v_n = 0 THEN
            RETURN v_ids;  -- an empty batch records nothing
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'MN009', MESSAGE = format('session %s is %s', p_session_id, v_status);
    END IF;

    -- The batch's tool calls, before its tool results look for them.
    IF v_any_calls THEN
        BEGIN
            -- row by row, INSERT ... VALUES: on a Citus coordinator (a call in a
            -- transaction block) an INSERT ... SELECT from no table goes to the shard as
            -- COPY, which row-level security refuses
            FOR k IN 1 .. v_n LOOP
                CONTINUE WHEN v_calls_of[k] IS NULL;
                FOR v_call IN SELECT c FROM jsonb_array_elements(v_calls_of[k]) AS c LOOP
                    INSERT INTO mnemo.tool_calls (tenant_id, session_id, tool_call_id, message_id, turn_index, name)
                    VALUES (p_tenant_id, p_session_id, v_call ->> 'id', v_ids[k], v_first_turn + k - 1,
                        v_call #>> '{function,name}');
                END LOOP;
            END LOOP;
        EXCEPTION WHEN unique_violation THEN
            RAISE EXCEPTION USING ERRCODE = 'MN012',
                MESSAGE = CASE WHEN v_n = 1 THEN 'a tool_call id in this message was already used in this session'
                    ELSE 'a tool_call id in these messages was used twice, or already in this session' END;
        END;
    END IF;

    -- Each tool result answers a call of an earlier message of its session: an earlier
    -- turn (the session's own order, gapless under its lock), not a lower message id
    -- (the ids' order is the tenant's; nothing here needs it).
    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN v_roles[i] <> 'tool';
        v_at := CASE WHEN v_n > 1 THEN format('message %s of %s: ', i, v_n) ELSE '' END;
        -- scalars, not v_ids[i]: Citus 13.2 crashes deparsing an array element in UPDATE SET
        v_result_id := v_ids[i];
        v_call_id := v_call_ids[i];
        v_turn := v_first_turn + i - 1;
        UPDATE mnemo.tool_calls AS tc SET result_message_id = v_result_id
        WHERE tc.tenant_id = p_tenant_id AND tc.session_id = p_session_id
            AND tc.tool_call_id = v_call_id AND tc.turn_index < v_turn AND tc.result_message_id IS NULL;
        IF NOT FOUND THEN
            IF EXISTS (SELECT FROM mnemo.tool_calls AS tc WHERE tc.tenant_id = p_tenant_id
                AND tc.session_id = p_session_id AND tc.tool_call_id = v_call_id
                AND tc.turn_index < v_turn) THEN
                RAISE EXCEPTION USING ERRCODE = 'MN012',
                    MESSAGE = format('%stool call %L already has a result', v_at, v_call_ids[i]);
            END IF;
            RAISE EXCEPTION USING ERRCODE = 'MN006',
                MESSAGE = format('%sno earlier assistant message in session %s issued tool call %L',
                    v_at, p_session_id, v_call_ids[i]),
                HINT = 'Record the assistant message with its tool_calls before the tool results.';
        END IF;
        v_bytes := coalesce(octet_length(v_texts[i]), 0);
        IF v_artifact_threshold IS NULL THEN
            v_artifact_threshold := (mnemo_internal.setting('artifact_threshold_bytes'))::integer;
        END IF;
        IF v_bytes > v_artifact_threshold THEN
            v_artifact_id := nextval('mnemo.artifacts_artifact_id_seq');
            INSERT INTO mnemo.artifacts (
                tenant_id, artifact_id, session_id, message_id, kind, bytes, byte_size, sha256, meta)
            VALUES (
                p_tenant_id, v_artifact_id, p_session_id, v_ids[i], 'tool_output',
                convert_to(v_texts[i], 'UTF8'), v_bytes, sha256(convert_to(v_texts[i], 'UTF8')),
                jsonb_build_object('tool_call_id', v_call_ids[i], 'name', v_names[i]));
            v_texts[i] := mnemo_internal.excerpt(
                v_texts[i], (mnemo_internal.setting('excerpt_bytes'))::integer, v_artifact_id);
            v_parts_of[i] := NULL;  -- the excerpt replaces the parts as plain text
            v_artifacts[i] := v_artifact_id;
        END IF;
    END LOOP;
    v_at := '';

    FOR i IN 1 .. v_n LOOP
        v_stored := array_append(v_stored, jsonb_strip_nulls(jsonb_build_object(
            'role', v_roles[i],
            'content', coalesce(v_parts_of[i], to_jsonb(v_texts[i])),
            'name', v_names[i],
            'tool_calls', v_calls_of[i],
            'tool_call_id', v_call_ids[i])));
    END LOOP;
    -- Both counts in one call; the messages_line_tokens trigger keeps line_tokens.
    SELECT t.tokens, t.line_tokens INTO v_tokens, v_line_tokens
    FROM mnemo_internal.message_tokens(v_stored, v_texts) AS t;

    -- Row by row, INSERT ... VALUES, the tags and the time computed first: on a Citus
    -- coordinator (a call in a transaction block) an INSERT ... SELECT from no table
    -- goes to the shard as COPY, which row-level security refuses, and Citus refuses a
    -- subquery in VALUES. The same rows on one server.
    FOR k IN 1 .. v_n LOOP
        v_tags := ARRAY(SELECT jsonb_array_elements_text(v_tag_lists[k]));
        v_created := coalesce(p_created_at[k], now());
        INSERT INTO mnemo.messages (
            tenant_id, message_id, session_id, turn_index, role, content, content_parts, name,
            tool_calls, tool_call_id, token_count, line_tokens, content_hash, sensitivity, tags, artifact_id,
            model, finish_reason, prompt_tokens, completion_tokens, latency_ms, metadata, created_at)
        VALUES (
            p_tenant_id, v_ids[k], p_session_id, v_first_turn + k - 1, v_roles[k], v_texts[k], v_parts_of[k],
            v_names[k], v_calls_of[k], v_call_ids[k], v_tokens[k], v_line_tokens[k],
            sha256(convert_to(v_stored[k]::text, 'UTF8')), p_sensitivity, v_tags, v_artifacts[k],
            v_metas[k] ->> 'model', v_metas[k] ->> 'finish_reason',
            (v_metas[k] ->> 'prompt_tokens')::integer, (v_metas[k] ->> 'completion_tokens')::integer,
            (v_metas[k] ->> 'latency_ms')::integer,
            v_metas[k] || jsonb_strip_nulls(jsonb_build_object('refusal', v_refusals[k])), v_created);
    END LOOP;

    -- Paging, message by message in order, in one call.
    FOR i IN 1 .. v_n LOOP
        v_paging := v_paging || jsonb_build_array(jsonb_build_object(
            'message', jsonb_build_object('message_id', v_ids[i], 'role', v_roles[i], 'content', v_texts[i],
                'tool_calls', v_calls_of[i], 'tool_call_id', v_call_ids[i], 'turn', v_first_turn + i - 1,
                'tokens', v_tokens[i], 'metadata', v_metas[i]),
            'tags', v_cleanups[i]));
    END LOOP;
    PERFORM mnemo_internal.paging_call('messages', p_tenant_id, p_session_id,
        jsonb_build_object('messages', v_paging));

    -- An 'embed' job per message with text, in message order (what enqueue_job does for
    -- one, without its call: the ids are new, so no queued job has their dedup keys; the
    -- jobs policy checks the tenant). Row by row, INSERT ... VALUES, as the messages above:
    -- Citus refuses an INSERT ... SELECT from no table under row-level security.
    v_any_text := false;
    FOR k IN 1 .. v_n LOOP
        CONTINUE WHEN coalesce(v_texts[k], '') = '';
        INSERT INTO mnemo.jobs (tenant_id, kind, dedup_key, payload, run_after)
        VALUES (p_tenant_id, 'embed', 'message:' || v_ids[k],
            jsonb_build_object('target', 'message', 'message_id', v_ids[k],
                'created_at', coalesce(p_created_at[k], now())), now())
        ON CONFLICT (tenant_id, kind, dedup_key) WHERE status = 'queued' DO NOTHING;
        v_any_text := true;
    END LOOP;
    -- Memory formation, one queued job per session (mnemo_internal.extract): usually
    -- queued already by the turn before, which enqueue_job would find only after a
    -- conflicting INSERT attempt.
    IF v_any_text AND NOT EXISTS (
        SELECT FROM mnemo.jobs AS j WHERE j.tenant_id = p_tenant_id AND j.kind = 'extract'
            AND j.dedup_key = 'session:' || p_session_id AND j.status = 'queued') THEN
        PERFORM mnemo_internal.enqueue_job(p_tenant_id, 'extract', 'session:' || p_session_id,
            jsonb_build_object('session_id', p_session_id));
    END IF;
    RETURN v_ids;
END;
$$;

COMMENT ON FUNCTION mnemo.record_messages(text, uuid, jsonb[], text, text[], timestamptz[], jsonb[]) IS
'Appends OpenAI chat messages to a session in one call, all or nothing; returns their ids in order.';
