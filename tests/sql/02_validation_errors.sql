-- Write API: the happy path of mnemo.record_message (ids, gapless turns, token counts,
-- hashes, artifacts, embed jobs) and every validation error by SQLSTATE, each failure
-- followed (singly, or once per group of calls) by a check that nothing was written.
\ir tap_begin.psql
SELECT plan(179);

-- Fixtures -----------------------------------------------------------------------
-- Tenant tap_val with four sessions: S1 active, S2 closed, S3 expired, S4 active.
SELECT is(mnemo.create_tenant('tap_val', 'pgTAP validation'), 'tap_val', 'create_tenant returns the tenant id');
SELECT is(mnemo.start_session('tap_val', p_session_id => 'a0000000-0000-4000-8000-000000000001'),
    'a0000000-0000-4000-8000-000000000001'::uuid, 'start_session returns the given session id');
SELECT isnt(mnemo.start_session('tap_val', p_session_id => 'a0000000-0000-4000-8000-000000000002'), NULL,
    'second session opened');
SELECT isnt(mnemo.start_session('tap_val', p_session_id => 'a0000000-0000-4000-8000-000000000003'), NULL,
    'third session opened');
SELECT isnt(mnemo.start_session('tap_val', p_session_id => 'a0000000-0000-4000-8000-000000000004'), NULL,
    'fourth session opened');
UPDATE mnemo.sessions SET status = 'closed'
WHERE tenant_id = 'tap_val' AND session_id = 'a0000000-0000-4000-8000-000000000002';
UPDATE mnemo.sessions SET status = 'expired'
WHERE tenant_id = 'tap_val' AND session_id = 'a0000000-0000-4000-8000-000000000003';

-- pg_temp.rec(message): record a message into S1.
CREATE FUNCTION pg_temp.rec(p_message jsonb) RETURNS bigint LANGUAGE sql AS $$
    SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000001', p_message)
$$;

-- pg_temp.state(): everything a write could touch, for the "nothing written" checks.
CREATE FUNCTION pg_temp.state() RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object(
        'tenants', (SELECT count(*) FROM mnemo.tenants WHERE tenant_id LIKE 'tap\_val%'),
        'sessions', (SELECT jsonb_object_agg(session_id, turn_count) FROM mnemo.sessions
            WHERE tenant_id = 'tap_val'),
        'messages', (SELECT count(*) FROM mnemo.messages WHERE tenant_id = 'tap_val'),
        'tool_calls', (SELECT count(*) FROM mnemo.tool_calls WHERE tenant_id = 'tap_val'),
        'tool_results', (SELECT count(result_message_id) FROM mnemo.tool_calls WHERE tenant_id = 'tap_val'),
        'artifacts', (SELECT count(*) FROM mnemo.artifacts WHERE tenant_id = 'tap_val'),
        'jobs', (SELECT count(*) FROM mnemo.jobs WHERE tenant_id = 'tap_val'),
        'prompts', (SELECT count(*) FROM mnemo.system_prompts WHERE tenant_id = 'tap_val'),
        'settings', (SELECT jsonb_object_agg(key, value) FROM mnemo_internal.settings
            WHERE key IN ('hash_partitions', 'max_message_bytes', 'max_artifact_bytes',
                'artifact_threshold_bytes', 'excerpt_bytes', 'job_max_tries')))
$$;
CREATE TEMP TABLE tap_base (s jsonb);
INSERT INTO tap_base VALUES (NULL);
-- pg_temp.unchanged(description): the state equals the last snapshot.
CREATE FUNCTION pg_temp.unchanged(p_description text) RETURNS text LANGUAGE sql AS $$
    SELECT is(pg_temp.state(), (SELECT s FROM tap_base), p_description)
$$;
-- pg_temp.refused(sql, state, message, description): the call fails with that SQLSTATE
-- (and message, when given), then the state equals the last snapshot: two tests.
CREATE FUNCTION pg_temp.refused(p_sql text, p_state text, p_message text, p_description text)
RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    RETURN NEXT throws_ok(p_sql, p_state, p_message, p_description || ' -> ' || p_state);
    RETURN NEXT pg_temp.unchanged(p_description || ': nothing written');
END
$$;

-- Message ids by label, and the original of a large tool output.
CREATE TEMP TABLE tap_ids (k text PRIMARY KEY, id bigint);
CREATE TEMP TABLE tap_big AS
SELECT string_agg(format('line %s: ünïcödé — ✓ résumé %s', n, repeat('x', n % 17)), E'\n' ORDER BY n) AS t
FROM generate_series(1, 200) AS n;

-- Happy path ------------------------------------------------------------------------
-- user, assistant issuing two tool calls (no content), a small tool result.
INSERT INTO tap_ids VALUES ('m0', pg_temp.rec('{"role": "user", "content": "Hello, my name is Ada."}'));
INSERT INTO tap_ids VALUES ('m1', pg_temp.rec('{"role": "assistant", "content": null, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
    {"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"/log\"}"}}]}'));
INSERT INTO tap_ids VALUES ('m2', pg_temp.rec('{"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}'));

SELECT is((SELECT count(id)::integer FROM tap_ids), 3, 'record_message returns a message id for each message');
SELECT set_eq(
    $$SELECT message_id FROM mnemo.messages WHERE tenant_id = 'tap_val'$$,
    $$SELECT id FROM tap_ids$$, 'the returned ids are the stored message ids');
SELECT results_eq(
    $$SELECT turn_index FROM mnemo.messages
      WHERE tenant_id = 'tap_val' AND session_id = 'a0000000-0000-4000-8000-000000000001'
      ORDER BY message_id$$,
    ARRAY[0, 1, 2], 'turn indexes are 0, 1, 2 in order');
SELECT results_eq(
    $$SELECT role FROM mnemo.messages WHERE tenant_id = 'tap_val' ORDER BY turn_index$$,
    ARRAY['user', 'assistant', 'tool'], 'roles are stored');
SELECT is((SELECT turn_count FROM mnemo.sessions
        WHERE tenant_id = 'tap_val' AND session_id = 'a0000000-0000-4000-8000-000000000001'),
    3, 'sessions.turn_count counts the messages') FROM tap_here;
SELECT is_empty(
    $$SELECT message_id FROM mnemo.messages WHERE tenant_id = 'tap_val' AND NOT token_count > 0$$,
    'every message has token_count > 0');
SELECT is_empty(
    $$SELECT message_id FROM mnemo.messages WHERE tenant_id = 'tap_val'
      AND content IS NOT NULL AND token_count < mnemo.count_tokens(content)$$,
    'token_count covers at least the tokens of the content');
SELECT is_empty(
    $$SELECT message_id FROM mnemo.messages WHERE tenant_id = 'tap_val'
      AND (content_hash IS NULL OR octet_length(content_hash) <> 32)$$,
    'every message has a SHA-256 content hash');
SELECT is((SELECT content FROM mnemo.messages WHERE message_id = (SELECT id FROM tap_ids WHERE k = 'm0')),
    'Hello, my name is Ada.', 'user content is stored verbatim');
SELECT is((SELECT jsonb_array_length(tool_calls) FROM mnemo.messages
        WHERE message_id = (SELECT id FROM tap_ids WHERE k = 'm1')),
    2, 'assistant tool_calls are stored');
SELECT results_eq(
    $$SELECT tool_call_id, name, result_message_id FROM mnemo.tool_calls
      WHERE tenant_id = 'tap_val' ORDER BY tool_call_id$$,
    $$VALUES ('call_1', 'get_weather', (SELECT id FROM tap_ids WHERE k = 'm2')),
             ('call_2', 'read_file', NULL::bigint)$$,
    'tool_calls are registered and call_1 is linked to its result');
SELECT is((SELECT artifact_id FROM mnemo.messages WHERE message_id = (SELECT id FROM tap_ids WHERE k = 'm2')),
    NULL, 'a small tool output stays in the message (no artifact)');
-- Rows of today land in the month partition, not in the DEFAULT one.
SELECT is_empty(
    $$SELECT tableoid::regclass::text FROM mnemo.messages
      WHERE tenant_id = 'tap_val' AND tableoid::regclass::text LIKE '%\_default'$$,
    'messages of today are stored in their month partition');

-- Large tool output: lower the threshold in this transaction, then answer call_2
-- with ~7 kB of multi-byte text.
UPDATE mnemo_internal.settings SET value = '1000' WHERE key = 'artifact_threshold_bytes';
UPDATE mnemo_internal.settings SET value = '400' WHERE key = 'excerpt_bytes';
INSERT INTO tap_ids
SELECT 'm3', pg_temp.rec(jsonb_build_object('role', 'tool', 'tool_call_id', 'call_2', 'content', t))
FROM tap_big;
CREATE TEMP TABLE tap_m3 AS
SELECT m.* FROM mnemo.messages AS m WHERE m.message_id = (SELECT id FROM tap_ids WHERE k = 'm3');

SELECT cmp_ok((SELECT octet_length(t) FROM tap_big), '>', 5000, 'the large output is > 5000 bytes');
SELECT isnt((SELECT artifact_id FROM tap_m3), NULL, 'a large tool output gets an artifact_id');
SELECT is((SELECT turn_index FROM tap_m3), 3, 'the large tool output is turn 3');
SELECT cmp_ok((SELECT octet_length(content) FROM tap_m3), '<', (SELECT octet_length(t) FROM tap_big),
    'the message keeps a shorter excerpt');
SELECT ok((SELECT content LIKE 'line 1: %' FROM tap_m3), 'the excerpt keeps the head of the output');
SELECT ok((SELECT strpos(content, format('artifact %s', artifact_id)) > 0 FROM tap_m3),
    'the excerpt names its artifact');
SELECT is(mnemo.get_artifact('tap_val', (SELECT artifact_id FROM tap_m3)),
    (SELECT convert_to(t, 'UTF8') FROM tap_big), 'get_artifact returns the full bytes, byte-exact');
SELECT results_eq(
    $$SELECT byte_size, sha256, message_id, session_id FROM mnemo.artifacts
      WHERE tenant_id = 'tap_val' AND artifact_id = (SELECT artifact_id FROM tap_m3)$$,
    $$SELECT octet_length(t)::bigint, sha256(convert_to(t, 'UTF8')), (SELECT id FROM tap_ids WHERE k = 'm3'),
             'a0000000-0000-4000-8000-000000000001'::uuid FROM tap_big$$,
    'the artifact records size, SHA-256, message and session');

-- One embed job per message with content (not the content-less assistant message).
SELECT set_eq(
    $$SELECT (payload ->> 'message_id')::bigint FROM mnemo.jobs
      WHERE tenant_id = 'tap_val' AND kind = 'embed' AND status = 'queued'
          AND payload ->> 'target' = 'message' AND dedup_key = 'message:' || (payload ->> 'message_id')$$,
    $$SELECT id FROM tap_ids WHERE k IN ('m0', 'm2', 'm3')$$,
    'an embed job is queued for each message with content, and only for those');

-- A message dated beyond the prepared months is kept in the DEFAULT partition.
INSERT INTO tap_ids SELECT 'm4', mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000001',
    '{"role": "assistant", "content": "From the future."}', p_created_at => '2100-01-15');
SELECT alike(
    (SELECT tableoid::regclass::text FROM mnemo.messages WHERE message_id = (SELECT id FROM tap_ids WHERE k = 'm4')),
    -- on Citus tableoid names the partition's shard (mnemo.messages_default_102299)
    CASE WHEN :'tap_citus' THEN '%\_default\_%' ELSE '%\_default' END,
    'a message with no month partition yet lands in the DEFAULT partition');

UPDATE tap_base SET s = pg_temp.state();

-- MN002 unknown tenant -----------------------------------------------------------------
SELECT throws_ok($$SELECT mnemo.record_message('tap_val_nope', 'a0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "hi"}')$$, 'MN002', NULL, 'record_message: unknown tenant -> MN002');
SELECT pg_temp.unchanged('unknown tenant (record_message): nothing written');
SELECT throws_ok($$SELECT mnemo.start_session('tap_val_nope')$$, 'MN002', NULL,
    'start_session: unknown tenant -> MN002');
SELECT pg_temp.unchanged('unknown tenant (start_session): nothing written');
SELECT throws_ok($$SELECT mnemo.get_artifact('tap_val_nope', 1)$$, 'MN002', NULL,
    'get_artifact: unknown tenant -> MN002');
SELECT throws_ok($$SELECT mnemo.bind_role(current_user, 'tap_val_nope')$$, 'MN002', NULL,
    'bind_role: unknown tenant -> MN002');
SELECT pg_temp.unchanged('unknown tenant (bind_role): nothing written');

-- MN003 unknown session ----------------------------------------------------------------
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-0000000000ff',
    '{"role": "user", "content": "hi"}')$$, 'MN003', NULL, 'record_message: unknown session -> MN003');
SELECT pg_temp.unchanged('unknown session: nothing written');
SELECT throws_ok($$SELECT mnemo.start_session('tap_val',
    p_parent_session_id => 'a0000000-0000-4000-8000-0000000000ff')$$, 'MN003', NULL,
    'start_session: unknown parent session -> MN003');
SELECT pg_temp.unchanged('unknown parent session: nothing written');

-- MN004 malformed message -----------------------------------------------------------------
SELECT pg_temp.refused(format('SELECT pg_temp.rec(%L)', v.message), 'MN004', v.error, v.description)
FROM (VALUES
    (1, '"hello"', NULL, 'message is a JSON string'),
    (2, '[{"role": "user", "content": "hi"}]', NULL, 'message is a JSON array'),
    (3, '{"role": 1, "content": "hi"}', NULL, 'role is not a string'),
    (4, '{"content": "hi"}', NULL, 'role missing'),
    (5, '{"role": "user", "content": "hi", "colour": "red"}',
        'unexpected message field ''colour''', 'unexpected key (the error names it)'),
    (6, '{"role": "user", "content": 42}', NULL, 'content is a number'),
    (7, '{"role": "user", "content": {"text": "hi"}}', NULL, 'content is an object'),
    (8, '{"role": "user", "content": []}', NULL, 'content is an empty array of parts'),
    (9, '{"role": "user", "content": [{"type": "text", "text": 5}]}',
        NULL, 'a text part without a string text'),
    (10, '{"role": "user", "content": ["hi"]}', NULL, 'a part that is not an object'),
    (11, '{"role": "user", "name": 7, "content": "hi"}', NULL, 'name is not a string'),
    (12, '{"role": "user"}', NULL, 'user message without content'),
    (13, '{"role": "user", "content": null}', NULL, 'user message with null content'),
    (14, '{"role": "assistant"}', NULL, 'assistant message without content or tool_calls'),
    (15, '{"role": "assistant", "tool_calls": {"id": "call_9"}}', NULL, 'tool_calls not an array'),
    (16, '{"role": "assistant", "tool_calls": []}', NULL, 'tool_calls empty'),
    (17, '{"role": "assistant", "tool_calls": [{"id": "call_9", "type": "function",
            "function": {"name": "f", "arguments": {"a": 1}}}]}',
        NULL, 'tool call arguments not a JSON string'),
    (18, '{"role": "assistant", "tool_calls": [{"type": "function",
            "function": {"name": "f", "arguments": "{}"}}]}',
        NULL, 'tool call without id'),
    (19, '{"role": "assistant", "tool_calls": [{"id": "call_9", "type": "retrieval",
            "function": {"name": "f", "arguments": "{}"}}]}',
        NULL, 'tool call of type other than function'),
    (20, '{"role": "user", "content": "hi", "tool_calls": [{"id": "call_9",
            "type": "function", "function": {"name": "f", "arguments": "{}"}}]}',
        NULL, 'user message carrying tool_calls'),
    (21, '{"role": "tool", "content": "42"}', NULL, 'tool message without tool_call_id'),
    (22, '{"role": "tool", "tool_call_id": 7, "content": "42"}',
        NULL, 'tool message with a non-string tool_call_id'),
    (23, '{"role": "user", "content": "hi", "tool_call_id": "call_1"}',
        NULL, 'user message carrying tool_call_id')
) AS v (n, message, error, description)
ORDER BY v.n;

-- MN005 unknown role -------------------------------------------------------------------------
SELECT pg_temp.refused(format('SELECT pg_temp.rec(%L)', v.message), 'MN005', v.error, v.description)
FROM (VALUES
    (1, '{"role": "wizard", "content": "hi"}', NULL, 'role wizard'),
    (2, '{"role": "function", "content": "hi"}', NULL, 'legacy role function')
) AS v (n, message, error, description)
ORDER BY v.n;

-- MN006 tool result for no earlier call --------------------------------------------------------
SELECT throws_ok($$SELECT pg_temp.rec('{"role": "tool", "tool_call_id": "call_nope", "content": "42"}')$$,
    'MN006', NULL, 'tool result for an unknown tool_call_id -> MN006');
SELECT pg_temp.unchanged('unknown tool call: nothing written');
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000004',
    '{"role": "tool", "tool_call_id": "call_2", "content": "42"}')$$,
    'MN006', NULL, 'tool result for a call issued in another session -> MN006');
SELECT pg_temp.unchanged('call of another session: nothing written');

-- MN007 oversize content ------------------------------------------------------------------------
UPDATE mnemo_internal.settings SET value = '100' WHERE key = 'max_message_bytes';
UPDATE tap_base SET s = pg_temp.state();
SELECT throws_ok($$SELECT pg_temp.rec(jsonb_build_object('role', 'user', 'content', repeat('a', 101)))$$,
    'MN007', NULL, 'user content of 101 bytes over a 100-byte limit -> MN007');
SELECT pg_temp.unchanged('oversize user message: nothing written');
SELECT throws_ok($$SELECT pg_temp.rec(jsonb_build_object('role', 'assistant', 'content', repeat('é', 60)))$$,
    'MN007', NULL, 'the limit counts bytes: 60 two-byte characters (120 bytes) -> MN007');
SELECT pg_temp.unchanged('oversize multi-byte message: nothing written');
SELECT throws_ok($$SELECT pg_temp.rec(jsonb_build_object('role', 'user', 'content',
    jsonb_build_array(jsonb_build_object('type', 'text', 'text', repeat('a', 60)),
                      jsonb_build_object('type', 'text', 'text', repeat('b', 60)))))$$,
    'MN007', NULL, 'the limit covers all text parts together -> MN007');
SELECT pg_temp.unchanged('oversize parts: nothing written');
SELECT lives_ok($$SELECT pg_temp.rec(jsonb_build_object('role', 'user', 'content', repeat('a', 100)))$$,
    'content of exactly the limit is accepted');
UPDATE mnemo_internal.settings SET value = '1048576' WHERE key = 'max_message_bytes';
-- Tool outputs have their own, larger limit (max_artifact_bytes): open call_8 first.
INSERT INTO tap_ids VALUES ('m5', pg_temp.rec('{"role": "assistant", "tool_calls": [{"id": "call_8",
    "type": "function", "function": {"name": "dump", "arguments": "{}"}}]}'));
UPDATE mnemo_internal.settings SET value = '2000' WHERE key = 'max_artifact_bytes';
UPDATE tap_base SET s = pg_temp.state();
SELECT throws_ok($$SELECT pg_temp.rec(jsonb_build_object('role', 'tool', 'tool_call_id', 'call_8',
    'content', repeat('z', 2001)))$$, 'MN007', NULL, 'tool output over max_artifact_bytes -> MN007');
SELECT pg_temp.unchanged('oversize tool output: nothing written (call_8 still open)');
UPDATE mnemo_internal.settings SET value = '104857600' WHERE key = 'max_artifact_bytes';
UPDATE tap_base SET s = pg_temp.state();

-- MN009 session not active -----------------------------------------------------------------------
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000002',
    '{"role": "user", "content": "hi"}')$$, 'MN009', NULL, 'record into a closed session -> MN009');
SELECT pg_temp.unchanged('closed session: nothing written (turn_count unchanged)');
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000003',
    '{"role": "user", "content": "hi"}')$$, 'MN009', NULL, 'record into an expired session -> MN009');
SELECT pg_temp.unchanged('expired session: nothing written');

-- MN010 not found ---------------------------------------------------------------------------------
SELECT throws_ok($$SELECT mnemo.get_artifact('tap_val', -1)$$, 'MN010', NULL, 'get_artifact of a missing id -> MN010');
SELECT is(mnemo.create_tenant('tap_val_other'), 'tap_val_other', 'a second tenant');
UPDATE tap_base SET s = pg_temp.state();
SELECT throws_ok(format('SELECT mnemo.get_artifact(%L, %s)', 'tap_val_other', (SELECT artifact_id FROM tap_m3)),
    'MN010', NULL, 'get_artifact of another tenant''s artifact -> MN010');
SELECT pg_temp.unchanged('get_artifact failures: nothing written');

-- MN012 duplicates ---------------------------------------------------------------------------------
SELECT throws_ok($$SELECT mnemo.start_session('tap_val', p_session_id => 'a0000000-0000-4000-8000-000000000001')$$,
    'MN012', NULL, 'start_session with an existing session id -> MN012');
SELECT pg_temp.unchanged('duplicate session: nothing written');
SELECT throws_ok($$SELECT pg_temp.rec('{"role": "tool", "tool_call_id": "call_1", "content": "again"}')$$,
    'MN012', NULL, 'a second result for call_1 -> MN012');
SELECT pg_temp.unchanged('duplicate tool result: nothing written');
SELECT throws_ok($$SELECT pg_temp.rec('{"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
    "function": {"name": "f", "arguments": "{}"}}]}')$$, 'MN012', NULL,
    'an assistant message reusing tool call id call_1 -> MN012');
SELECT pg_temp.unchanged('reused tool call id: nothing written');
SELECT throws_ok($$SELECT pg_temp.rec('{"role": "assistant", "tool_calls": [
    {"id": "call_7", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": "call_7", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}')$$, 'MN012', NULL,
    'one assistant message issuing the same call id twice -> MN012');
SELECT pg_temp.unchanged('call id twice in one message: nothing written');

-- MN001 bad arguments ------------------------------------------------------------------------------
SELECT throws_ok($$SELECT mnemo.start_session('tap_val', p_channel => 'telepathy')$$, 'MN001', NULL,
    'start_session: unknown channel -> MN001');
SELECT pg_temp.unchanged('bad channel: nothing written');
SELECT throws_ok($$SELECT mnemo.start_session('tap_val', p_context_window => 100)$$, 'MN001', NULL,
    'start_session: context window below 256 -> MN001');
SELECT pg_temp.unchanged('bad context window: nothing written');
SELECT throws_ok($$SELECT mnemo.start_session('tap_val', p_context_window => 4096, p_response_reserve => 4096)$$,
    'MN001', NULL, 'start_session: response reserve not below the window -> MN001');
SELECT pg_temp.unchanged('bad response reserve: nothing written');
SELECT throws_ok($$SELECT mnemo.start_session('tap_val', p_agent_id => '')$$, 'MN001', NULL,
    'start_session: empty agent id -> MN001');
SELECT throws_ok($$SELECT mnemo.start_session('tap_val', p_config => '[]')$$, 'MN001', NULL,
    'start_session: config not an object -> MN001');
SELECT throws_ok($$SELECT mnemo.start_session('tap_val', p_system_prompt => 'You are terse.', p_channel => 'x')$$,
    'MN001', NULL, 'start_session: a bad argument stores no system prompt either -> MN001');
SELECT pg_temp.unchanged('start_session bad arguments: nothing written');
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "hi"}', p_sensitivity => 'top-secret')$$, 'MN001', NULL,
    'record_message: unknown sensitivity -> MN001');
SELECT pg_temp.unchanged('bad sensitivity: nothing written');
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', NULL, '{"role": "user", "content": "hi"}')$$,
    'MN001', NULL, 'record_message: no session id -> MN001');
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "hi"}', p_tags => ARRAY['a', NULL])$$, 'MN001', NULL,
    'record_message: a NULL tag -> MN001');
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "hi"}', p_metadata => '{"prompt_tokens": -1}')$$, 'MN001', NULL,
    'record_message: negative metadata.prompt_tokens -> MN001');
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "hi"}', p_metadata => '[]')$$, 'MN001', NULL,
    'record_message: metadata not an object -> MN001');
SELECT throws_ok($$SELECT mnemo.record_message('', 'a0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "hi"}')$$, 'MN001', NULL, 'record_message: empty tenant id -> MN001');
SELECT pg_temp.unchanged('record_message bad arguments: nothing written');
SELECT throws_ok($$SELECT mnemo.create_tenant('tap val!')$$, 'MN001', NULL,
    'create_tenant: id with a space and ! -> MN001');
SELECT throws_ok($$SELECT mnemo.create_tenant('-tap_val')$$, 'MN001', NULL,
    'create_tenant: id starting with - -> MN001');
SELECT throws_ok($$SELECT mnemo.create_tenant(NULL)$$, 'MN001', NULL, 'create_tenant: NULL id -> MN001');
SELECT throws_ok($$SELECT mnemo.create_tenant('tap_val_' || repeat('x', 121))$$, 'MN001', NULL,
    'create_tenant: id of 129 characters -> MN001');
SELECT throws_ok($$SELECT mnemo.create_tenant('tap_val_cfg', NULL, '[]')$$, 'MN001', NULL,
    'create_tenant: config not an object -> MN001');
SELECT throws_ok($$SELECT mnemo.create_tenant('tap_val_cfg', NULL, '{"memory_cap": -1}')$$, 'MN001', NULL,
    'create_tenant: negative memory_cap -> MN001');
SELECT throws_ok($$SELECT mnemo.create_tenant('tap_val_cfg', NULL, '{"memory_cap": 4096.5}')$$, 'MN001', NULL,
    'create_tenant: fractional memory_cap -> MN001');
SELECT throws_ok($$SELECT mnemo.create_tenant('tap_val_cfg', NULL, '{"memory_cap": "4k"}')$$, 'MN001', NULL,
    'create_tenant: memory_cap of another JSON type -> MN001');
SELECT pg_temp.unchanged('create_tenant bad arguments: no tenant written');
SELECT throws_ok($$SELECT mnemo.set_setting('tap_no_such_setting', '1')$$, 'MN001', NULL,
    'set_setting: unknown key -> MN001');
SELECT throws_ok($$SELECT mnemo.set_setting('max_message_bytes', '"big"')$$, 'MN001', NULL,
    'set_setting: value of another JSON type -> MN001');
SELECT throws_ok($$SELECT mnemo.set_setting('hash_partitions', '16')$$, 'MN001', NULL,
    'set_setting: hash_partitions is fixed -> MN001');
SELECT pg_temp.unchanged('set_setting bad arguments: settings unchanged');
SELECT throws_ok($$SELECT mnemo.bind_role('tap_no_such_role', 'tap_val')$$, 'MN001', NULL,
    'bind_role: no such role -> MN001');
SELECT pg_temp.unchanged('bind_role bad arguments: nothing written');

-- Issue 20: one timestamp range, one JSON nesting limit ----------------------------------------
SELECT throws_ok(format($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "hi"}', p_created_at => %L)$$, ts), 'MN001', NULL,
    format('record_message: created_at %s -> MN001', ts))
FROM unnest(ARRAY['294276-12-31', '4713-01-01 BC', 'infinity', '-infinity', '0001-12-31 23:00:00+00']) AS ts;
SELECT throws_ok($$SELECT mnemo.record_event('tap_val', 'a0000000-0000-4000-8000-000000000001', 'message',
    '{"text": "hi"}', p_created_at => 'infinity')$$, 'MN001', NULL, 'record_event: created_at infinity -> MN001');
SELECT throws_ok($$SELECT mnemo.record_event('tap_val', 'a0000000-0000-4000-8000-000000000001', 'task_update',
    '{"title": "ship", "due_at": "-infinity"}')$$, 'MN004', NULL,
    'record_event: task due_at -infinity -> MN004 (malformed content)');
SELECT throws_ok($$SELECT mnemo.record_event('tap_val', 'a0000000-0000-4000-8000-000000000001', 'task_update',
    '{"title": "ship"}', p_sensitivity => 'bogus')$$, 'MN001', NULL,
    'record_event: unknown sensitivity -> MN001 (as record_message; was 23514)');
SELECT throws_ok($$SELECT mnemo.record_message('tap_val', 'a0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "my password is hunter2"}',
    p_metadata => ('{"x": ' || repeat('[', 1200) || repeat(']', 1200) || '}')::jsonb)$$, 'MN001',
    'metadata is nested deeper than 64 levels', 'record_message: metadata 1,200 deep -> MN001');
SELECT pg_temp.unchanged('extreme timestamps, deep JSON: nothing written');
SELECT is(mnemo_internal.checked_timestamp(ts::timestamptz, 'x'), ts::timestamptz,
    format('checked_timestamp keeps %s', ts))
FROM unnest(ARRAY['0002-01-01 00:00:00+00', '9998-12-31 23:59:59.999999+00']) AS ts;
SELECT throws_ok($$SELECT mnemo_internal.checked_timestamp('9999-01-01 00:00:00+00'::timestamptz, 'x')$$,
    'MN001', NULL, 'checked_timestamp: 9999-01-01 UTC is past the range');
SELECT throws_ok($$SELECT mnemo_internal.checked_timestamp('not a time', 'option x')$$,
    'MN001', 'option x must be a timestamp, got not a time', 'checked_timestamp: text that is no timestamp');
-- (the value of "x" is at level 1, the innermost of n nested arrays at level n)
SELECT lives_ok($$SELECT mnemo_internal.check_json_depth(('{"x": ' || repeat('[', 64) || repeat(']', 64) || '}')::jsonb,
    'x')$$, 'check_json_depth: 64 levels pass');
SELECT throws_ok($$SELECT mnemo_internal.check_json_depth(('{"x": ' || repeat('[', 65) || repeat(']', 65) || '}')::jsonb,
    'x')$$, 'MN001', 'x is nested deeper than 64 levels', 'check_json_depth: 65 levels -> MN001');

-- After all these failures the next message still gets the next turn (gapless). -----------
INSERT INTO tap_ids VALUES ('m6', pg_temp.rec('{"role": "user", "content": [{"type": "text", "text": "Thanks"},
    {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]}'));
SELECT results_eq(
    $$SELECT turn_index FROM mnemo.messages
      WHERE tenant_id = 'tap_val' AND session_id = 'a0000000-0000-4000-8000-000000000001'
      ORDER BY turn_index$$,
    $$SELECT generate_series(0, 7)$$, 'turn indexes stay gapless 0..7 after the failed calls');
SELECT results_eq(
    $$SELECT content, jsonb_array_length(content_parts) FROM mnemo.messages
      WHERE message_id = (SELECT id FROM tap_ids WHERE k = 'm6')$$,
    $$VALUES ('Thanks'::text, 2)$$, 'content parts are kept, their text is the content');
SELECT is(mnemo.set_setting('job_max_tries', '7'), '5'::jsonb, 'set_setting returns the old value');

-- open_session on a key it has opened stores the call's model and window: the same
-- checks as start_session (NULLs failed with 23502 on the sessions table; fuzz, 100k).
SELECT isnt(mnemo.open_session('tap_val', 'conv:known', p_model => 'gpt-4o-mini'), NULL, 'open_session opens a key');
SELECT throws_ok($$SELECT mnemo.open_session('tap_val', 'conv:known', p_model => NULL)$$,
    'MN001', 'model must not be empty', 'open_session of a known key: NULL model');
SELECT throws_ok($$SELECT mnemo.open_session('tap_val', 'conv:known', p_context_window => NULL)$$,
    'MN001', NULL, 'open_session of a known key: NULL context window');
SELECT throws_ok($$SELECT mnemo.open_session('tap_val', 'conv:known', p_context_window => 8192,
    p_response_reserve => 8192)$$, 'MN001', NULL, 'open_session of a known key: reserve not below the window');
SELECT results_eq($$SELECT s.model, s.context_window, s.response_reserve FROM mnemo.sessions AS s
    JOIN mnemo.transcripts AS t USING (tenant_id, session_id)
    WHERE t.tenant_id = 'tap_val' AND t.session_key = 'conv:known'$$,
    $$VALUES ('gpt-4o-mini'::text, 128000, 4096)$$, 'the refused calls changed nothing');
SELECT lives_ok($$SELECT mnemo.open_session('tap_val', 'conv:known', p_model => 'gpt-4.1', p_context_window => 64000)$$,
    'open_session of a known key with another model and window');
SELECT results_eq($$SELECT s.model, s.context_window FROM mnemo.sessions AS s
    JOIN mnemo.transcripts AS t USING (tenant_id, session_id)
    WHERE t.tenant_id = 'tap_val' AND t.session_key = 'conv:known'$$,
    $$VALUES ('gpt-4.1'::text, 64000)$$, 'the session takes the call''s model and window');

-- Regression (fixed) ----------------------------------------------------------
-- m4 (January 2100) waits in a DEFAULT partition. Creating that month must move it into
-- the new month partition, but the move does INSERT ... SELECT * and mnemo.messages has
-- a generated column (search_tsv): "cannot insert a non-DEFAULT value into column
-- search_tsv", so the whole call fails and no month partition is created. Kept last:
-- once fixed, the new partitions hold locks until this transaction ends.
SELECT lives_ok($$SELECT mnemo.create_message_partitions('2100-01-01', 1)$$,
    'create_message_partitions for a month that has rows in a DEFAULT partition');
SELECT alike(
    (SELECT tableoid::regclass::text FROM mnemo.messages WHERE message_id = (SELECT id FROM tap_ids WHERE k = 'm4')),
    -- a shard of it on Citus, whose create_time_partitions names it messages_p2100_01
    CASE WHEN :'tap_citus' THEN '%\_p2100\_01\_%' ELSE '%\_210001' END,
    'the waiting message moved into its month partition');

SELECT * FROM finish();
\ir tap_end.psql
