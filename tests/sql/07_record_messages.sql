-- mnemo.record_messages: a batch stores what one record_message call per message
-- stores (same columns, hashes, token counts, redactions, tool call links), takes
-- consecutive turns, queues one extract job, and refuses bad input in any message
-- with a project error that names the message, writing nothing.
\ir tap_begin.psql
SELECT plan(28);

SELECT is(mnemo.create_tenant('tap_rms'), 'tap_rms', 'tenant created');
SELECT isnt(mnemo.start_session('tap_rms', p_session_id => 'b0000000-0000-4000-8000-000000000001'), NULL, 'S1 (one call per message)');
SELECT isnt(mnemo.start_session('tap_rms', p_session_id => 'b0000000-0000-4000-8000-000000000002'), NULL, 'S2 (one batch)');
SELECT isnt(mnemo.start_session('tap_rms', p_session_id => 'b0000000-0000-4000-8000-000000000003'), NULL, 'S3 (errors)');

-- The same turn both ways: a user message with a secret, an assistant message with two
-- tool calls, their results, an assistant text with metadata and a refusal-free reply.
CREATE TEMP TABLE tap_turn (k integer, m jsonb, md jsonb, at timestamptz);
INSERT INTO tap_turn VALUES
    (1, '{"role": "user", "name": "ada", "content": "deploy with ghp_abcdefghijklmnopqrstuvwxyz0123456789 please"}',
        '{"model": "gpt-4o"}', '2025-03-01 10:00:00+00'),
    (2, '{"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a.py\"}"}},
        {"id": "call_b", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\": \"ls\"}"}}]}',
        '{"prompt_tokens": 12, "completion_tokens": 5}', NULL),
    (3, '{"role": "tool", "tool_call_id": "call_a", "content": "print(1)\n"}', '{}', NULL),
    (4, '{"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "a.py\nb.py"}]}', '{}', NULL),
    (5, '{"role": "assistant", "content": "Done: two files."}', '{"latency_ms": 40}', '2025-03-01 10:00:05+00');

CREATE TEMP TABLE tap_single AS
SELECT k, mnemo.record_message('tap_rms', 'b0000000-0000-4000-8000-000000000001', m, 'low', ARRAY['t1'], at, md) AS id
FROM tap_turn ORDER BY k;
CREATE TEMP TABLE tap_batch AS
SELECT mnemo.record_messages('tap_rms', 'b0000000-0000-4000-8000-000000000002',
    array_agg(m ORDER BY k), 'low', ARRAY['t1'], array_agg(at ORDER BY k), array_agg(md ORDER BY k)) AS ids
FROM tap_turn;

SELECT is(cardinality(ids), 5, 'one id per message') FROM tap_batch;
SELECT ok(ids = ARRAY(SELECT unnest(ids) ORDER BY 1), 'ids in the order of the messages') FROM tap_batch;
SELECT results_eq(
    $$SELECT message_id, turn_index FROM mnemo.messages WHERE tenant_id = 'tap_rms'
        AND session_id = 'b0000000-0000-4000-8000-000000000002' ORDER BY turn_index$$,
    $$SELECT i.id, (i.k - 1)::integer FROM tap_batch, unnest(ids) WITH ORDINALITY AS i (id, k)$$,
    'each message at its consecutive turn, with its id');

-- What is stored: column for column the same as five record_message calls.
CREATE FUNCTION pg_temp.stored(p_session uuid) RETURNS TABLE (stored jsonb) LANGUAGE sql AS $$
    SELECT to_jsonb(m) - 'message_id' - 'session_id' - 'created_at' - 'search_tsv' - 'embedding'
        || jsonb_build_object('at', m.created_at < '2026-01-01')
    FROM mnemo.messages AS m WHERE m.tenant_id = 'tap_rms' AND m.session_id = p_session ORDER BY m.turn_index
$$;
SELECT results_eq(
    $$SELECT stored FROM pg_temp.stored('b0000000-0000-4000-8000-000000000002')$$,
    $$SELECT stored FROM pg_temp.stored('b0000000-0000-4000-8000-000000000001')$$,
    'every stored column equals record_message''s (content, hash, tokens, line tokens, tags, metadata ...)');
SELECT is((SELECT metadata -> 'redactions' FROM mnemo.messages WHERE tenant_id = 'tap_rms'
        AND session_id = 'b0000000-0000-4000-8000-000000000002' AND turn_index = 0),
    '["github_token"]'::jsonb, 'the secret of message 1 is redacted, and flagged on that message') FROM tap_here;
SELECT is((SELECT count(*)::integer FROM mnemo.messages WHERE tenant_id = 'tap_rms'
        AND session_id = 'b0000000-0000-4000-8000-000000000002' AND metadata ? 'redactions'), 1,
    'only that message is flagged') FROM tap_here;
SELECT is((SELECT line_tokens FROM mnemo.messages WHERE tenant_id = 'tap_rms'
        AND session_id = 'b0000000-0000-4000-8000-000000000002' AND turn_index = 4),
    (mnemo_internal.line_tokens(ARRAY['Done: two files.']))[1], 'line_tokens as the trigger counts them') FROM tap_here;
SELECT results_eq(
    $$SELECT tool_call_id, turn_index, result_message_id IS NOT NULL FROM mnemo.tool_calls
        WHERE tenant_id = 'tap_rms' AND session_id = 'b0000000-0000-4000-8000-000000000002' ORDER BY 1$$,
    $$VALUES ('call_a', 1, true), ('call_b', 1, true)$$,
    'the batch''s tool calls are linked to the results in the same batch');
SELECT is((SELECT (total_prompt_tokens, total_completion_tokens, turn_count)::text FROM mnemo.sessions
        WHERE tenant_id = 'tap_rms' AND session_id = 'b0000000-0000-4000-8000-000000000002'),
    '(12,5,5)', 'the session''s counters: five turns, the metadata''s tokens') FROM tap_here;
SELECT is((SELECT count(*)::integer FROM mnemo.jobs WHERE tenant_id = 'tap_rms' AND kind = 'extract'
        AND payload ->> 'session_id' = 'b0000000-0000-4000-8000-000000000002'), 1, 'one extract job for the batch') FROM tap_here;
SELECT is((SELECT count(*)::integer FROM mnemo.jobs AS j, tap_batch AS b WHERE j.tenant_id = 'tap_rms'
        AND j.kind = 'embed' AND (j.payload ->> 'message_id')::bigint = ANY (b.ids)), 4,
    'an embed job per message with text');
SELECT is((SELECT count(*)::integer FROM mnemo.semantic_objects WHERE tenant_id = 'tap_rms'
        AND session_id = 'b0000000-0000-4000-8000-000000000002'),
    (SELECT count(*)::integer FROM mnemo.semantic_objects WHERE tenant_id = 'tap_rms'
        AND session_id = 'b0000000-0000-4000-8000-000000000001'), 'paging made the same objects') FROM tap_here;

-- Nothing written on any error ---------------------------------------------------------
CREATE FUNCTION pg_temp.state() RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object(
        'turns', (SELECT sum(turn_count) FROM mnemo.sessions WHERE tenant_id = 'tap_rms'),
        'messages', (SELECT count(*) FROM mnemo.messages WHERE tenant_id = 'tap_rms'),
        'tool_calls', (SELECT count(result_message_id) || '/' || count(*) FROM mnemo.tool_calls WHERE tenant_id = 'tap_rms'),
        'jobs', (SELECT count(*) FROM mnemo.jobs WHERE tenant_id = 'tap_rms'),
        'objects', (SELECT count(*) FROM mnemo.semantic_objects WHERE tenant_id = 'tap_rms'))
$$;
CREATE TEMP TABLE tap_base AS SELECT pg_temp.state() AS s;
-- pg_temp.refused(...) then pg_temp.unchanged(description): the call fails with that
-- SQLSTATE, then nothing is written: two tests, in two statements (on Citus the failed
-- call's writes, rolled back, still bar postgres from its shard until the statement's
-- transaction ends: tap_begin.psql).
CREATE FUNCTION pg_temp.refused(p_messages text, p_state text, p_message text, p_description text,
    p_extra text DEFAULT '')
RETURNS text LANGUAGE sql AS $$
    SELECT throws_ok(format('SELECT mnemo.record_messages(%L, %L, %L::jsonb[]%s)', 'tap_rms',
        'b0000000-0000-4000-8000-000000000003', p_messages, p_extra), p_state, p_message, p_description)
$$;
CREATE FUNCTION pg_temp.unchanged(p_description text) RETURNS text LANGUAGE sql AS $$
    SELECT is(pg_temp.state(), (SELECT s FROM tap_base), p_description || ': nothing written')
$$;

SELECT pg_temp.refused(ARRAY['{"role": "user", "content": "fine"}', '{"role": "bot", "content": "x"}']::text,
    'MN005', 'message 2 of 2: unknown role ''bot''', 'a bad role in message 2');
SELECT pg_temp.unchanged('a bad role in message 2');
SELECT pg_temp.refused(ARRAY['{"role": "tool", "tool_call_id": "c9", "content": "out"}',
    '{"role": "assistant", "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}']::text,
    'MN006', NULL, 'a tool result before its call');
SELECT pg_temp.unchanged('a tool result before its call');
SELECT pg_temp.refused(ARRAY[
    '{"role": "assistant", "tool_calls": [{"id": "c7", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}',
    '{"role": "assistant", "tool_calls": [{"id": "c7", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}']::text,
    'MN012', NULL, 'one tool call id twice in a batch');
SELECT pg_temp.unchanged('one tool call id twice in a batch');
SELECT pg_temp.refused(ARRAY['{"role": "user", "content": "a"}', '{"role": "user", "content": "b"}']::text,
    'MN001', 'created_at must be NULL or one timestamp per message', 'created_at not one per message',
    ', p_created_at => ARRAY[now()]');
SELECT pg_temp.unchanged('created_at not one per message');
SELECT pg_temp.refused('{{"{\"role\": \"user\", \"content\": \"a\"}"}}',
    'MN001', 'messages must be a one-dimensional array of messages', 'a two-dimensional array');
SELECT pg_temp.unchanged('a two-dimensional array');

SELECT is(mnemo.record_messages('tap_rms', 'b0000000-0000-4000-8000-000000000003', '{}'), '{}'::bigint [],
    'an empty batch records nothing');
SELECT throws_ok($$SELECT mnemo.record_messages('tap_rms', 'b0000000-0000-4000-8000-0000000000ff', '{}')$$,
    'MN003', NULL, 'an empty batch for an unknown session -> MN003');

SELECT * FROM finish();
\ir tap_end.psql
