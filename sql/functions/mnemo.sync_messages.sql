-- mnemo.sync_messages(p_tenant_id, p_session_id, p_messages, p_offset, p_metadata) -> jsonb
-- Records what is new in a client's history: the transparent proxy's write path. A
-- client resends its whole history on every call; p_messages is that history (OpenAI
-- chat messages) from position p_offset on (the proxy sends the model's reply alone,
-- at the position after the request's last message). At offset 0 the leading system
-- and developer messages are the session's system prompt (mnemo.open_session), not
-- history, and are skipped.
-- Each message is compared with the one recorded at its position by the hash of its
-- wire form (mnemo_internal.wire_hashes): a resend of the same history records
-- nothing. A history shorter than the recorded one, and matching it, records nothing
-- and supersedes nothing (a retry, or a client that drops the last reply to ask
-- again: the next reply at that position supersedes the old one).
-- A message that differs from the one recorded at its position is the client
-- rewriting its history (it compacted it, or the user edited or rewound a turn):
-- the recorded messages from that position on are superseded and the client's
-- version recorded after them. Superseded messages leave the session's active
-- history (is_compacted, with no compacted_into: no summary stands for them; the
-- client's rewrite does) and stay searchable and retrievable as past conversation;
-- their tool calls are released, so a rewritten turn may reuse its call ids; the
-- transcript's rewinds list says where and how many.
-- A message is recorded with the fields record_message stores (role, content, name,
-- tool_calls, tool_call_id, refusal); the others of a client's wire form (an SDK's
-- annotations, audio, function_call) and null ones are left out.
-- The new messages are recorded by one mnemo.record_messages call (all or nothing);
-- p_metadata is stored with each of them.
-- Returns {"session_id", "positions" (the length of the client's history as sent),
-- "recorded" (messages written), "message_ids", "rewound" ({"position",
-- "superseded"} or null)}. Raises MN001 (not an array, bad offset), MN003 (unknown
-- session) and record_messages' errors (nothing is written then).
-- Writes: messages (record_messages), transcripts, tool_calls.
CREATE OR REPLACE FUNCTION mnemo.sync_messages(
    p_tenant_id text,
    p_session_id uuid,
    p_messages jsonb,
    p_offset integer DEFAULT 0,
    p_metadata jsonb DEFAULT '{}'
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_hashes bytea [];
    v_ids bigint [];
    v_incoming bytea [];
    v_messages jsonb := p_messages;
    v_skip integer := 0;
    v_n integer;
    v_same integer := 0;
    v_at integer;
    v_superseded bigint [];
    v_rewound jsonb;
    v_rewind jsonb;
    v_new_ids bigint [] := '{}';
    v_message jsonb;
    v_batch jsonb [] := '{}';
    i integer;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    PERFORM mnemo_internal.check_json_depth(p_messages, 'messages');
    PERFORM mnemo_internal.check_json_depth(p_metadata, 'metadata');
    IF p_messages IS NULL OR jsonb_typeof(p_messages) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'messages must be a JSON array';
    END IF;
    IF p_offset IS NULL OR p_offset < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'offset must be >= 0';
    END IF;
    IF p_metadata IS NULL OR jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'metadata must be a JSON object';
    END IF;

    -- The session's transcript, locked: syncs of one session run one after another.
    SELECT t.wire_hashes, t.message_ids INTO v_hashes, v_ids FROM mnemo.transcripts AS t
    WHERE t.tenant_id = p_tenant_id AND t.session_id = p_session_id FOR UPDATE;
    IF NOT FOUND THEN
        IF NOT EXISTS (SELECT FROM mnemo.sessions AS s
            WHERE s.tenant_id = p_tenant_id AND s.session_id = p_session_id) THEN
            RAISE EXCEPTION USING ERRCODE = 'MN003',
                MESSAGE = format('unknown session %s for tenant %L', p_session_id, p_tenant_id),
                HINT = 'Open one with mnemo.open_session() or mnemo.start_session().';
        END IF;
        -- a session started without a key: its id is its key
        INSERT INTO mnemo.transcripts (tenant_id, session_key, session_id)
        VALUES (p_tenant_id, p_session_id::text, p_session_id) ON CONFLICT DO NOTHING;
        SELECT t.wire_hashes, t.message_ids INTO v_hashes, v_ids FROM mnemo.transcripts AS t
        WHERE t.tenant_id = p_tenant_id AND t.session_id = p_session_id FOR UPDATE;
    END IF;
    IF p_offset > cardinality(v_hashes) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('offset %s is past the %s messages recorded', p_offset, cardinality(v_hashes));
    END IF;

    IF p_offset = 0 THEN
        SELECT count(*) INTO v_skip FROM (
            SELECT e.m, bool_and(e.m ->> 'role' IN ('system', 'developer')) OVER (ORDER BY e.i) AS lead
            FROM jsonb_array_elements(p_messages) WITH ORDINALITY AS e (m, i)) AS x
        WHERE x.lead;
        IF v_skip > 0 THEN
            v_messages := jsonb_path_query_array(p_messages, format('$[%s to last]', v_skip)::jsonpath);
        END IF;
    END IF;
    v_incoming := mnemo_internal.wire_hashes(v_messages);
    v_n := cardinality(v_incoming);

    -- How many lead messages are the ones recorded at their positions
    WHILE v_same < v_n AND p_offset + v_same < cardinality(v_hashes)
        AND v_hashes[p_offset + v_same + 1] = v_incoming[v_same + 1] LOOP
        v_same := v_same + 1;
    END LOOP;

    IF v_same < v_n AND p_offset + v_same < cardinality(v_hashes) THEN
        v_at := p_offset + v_same;  -- 0-based position of the first rewritten message
        v_superseded := v_ids[v_at + 1:];
        UPDATE mnemo.messages AS m SET is_compacted = true
        WHERE m.tenant_id = p_tenant_id AND m.session_id = p_session_id
            AND m.message_id = ANY (v_superseded);
        UPDATE mnemo.tool_calls AS tc SET result_message_id = NULL
        WHERE tc.tenant_id = p_tenant_id AND tc.session_id = p_session_id
            AND tc.result_message_id = ANY (v_superseded);
        DELETE FROM mnemo.tool_calls AS tc
        WHERE tc.tenant_id = p_tenant_id AND tc.session_id = p_session_id
            AND tc.message_id = ANY (v_superseded);
        v_hashes := v_hashes[:v_at];
        v_ids := v_ids[:v_at];
        v_rewound := jsonb_build_object('position', v_at, 'superseded', cardinality(v_superseded));
    END IF;

    FOR i IN v_same + 1 .. v_n LOOP
        v_message := v_messages -> (i - 1);
        IF jsonb_typeof(v_message) = 'object' THEN
            SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}') INTO v_message
            FROM jsonb_each(v_message) AS e
            WHERE e.key IN ('role', 'content', 'name', 'tool_calls', 'tool_call_id', 'refusal')
                AND jsonb_typeof(e.value) <> 'null';
        END IF;
        v_batch := array_append(v_batch, v_message);
    END LOOP;
    IF cardinality(v_batch) > 0 THEN
        -- the new messages in one call (a turn: the reply, or a request's new messages)
        v_new_ids := mnemo.record_messages(p_tenant_id, p_session_id, v_batch,
            p_metadata => array_fill(p_metadata, ARRAY[cardinality(v_batch)]));
        v_hashes := v_hashes || v_incoming[v_same + 1:];
        v_ids := v_ids || v_new_ids;
    END IF;

    IF v_rewound IS NOT NULL OR cardinality(v_new_ids) > 0 THEN
        -- the rewind's entry built first: Citus refuses a STABLE function (now(),
        -- jsonb_build_object) inside the CASE of an UPDATE
        v_rewind := jsonb_build_array(v_rewound || jsonb_build_object('at', now()));
        UPDATE mnemo.transcripts AS t
        SET wire_hashes = v_hashes, message_ids = v_ids, updated_at = now(),
            rewinds = CASE WHEN v_rewound IS NULL THEN t.rewinds ELSE t.rewinds || v_rewind END
        WHERE t.tenant_id = p_tenant_id AND t.session_id = p_session_id;
    END IF;
    -- the client's history ends at p_offset + v_n: its next message (the reply) goes there,
    -- also when a longer history was recorded before (a retry)
    RETURN jsonb_build_object('session_id', p_session_id, 'positions', p_offset + v_n,
        'recorded', cardinality(v_new_ids), 'message_ids', to_jsonb(v_new_ids), 'rewound', v_rewound);
END;
$$;

COMMENT ON FUNCTION mnemo.sync_messages(text, uuid, jsonb, integer, jsonb) IS
'Records what is new in a client''s resent history (the proxy''s write path); handles rewrites.';
