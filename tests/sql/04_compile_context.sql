-- Read path: mnemo.compile_context / mnemo.compile_context_bundle from SQL — the
-- contract (signatures, output shape, budget, system prompt first, the context_log
-- row), the lexicon table, and every validation error by SQLSTATE with a check that
-- a failed call logged nothing. Behaviour at large (properties, stability, OpenAI SDK
-- validation, the onboarding scenario) is in tests/py/db/test_context*.py.
\ir tap_begin.psql
SELECT plan(37);

SELECT has_function('mnemo', 'compile_context', ARRAY['text', 'uuid', 'text', 'jsonb'],
    'compile_context(tenant, session, query, options) exists');
SELECT function_returns('mnemo', 'compile_context', ARRAY['text', 'uuid', 'text', 'jsonb'], 'jsonb',
    'compile_context returns jsonb');
SELECT has_function('mnemo', 'compile_context_bundle', ARRAY['text', 'uuid', 'text', 'jsonb'],
    'compile_context_bundle exists');
SELECT has_table('mnemo', 'lexicon', 'per-tenant BM25 statistics table exists');
SELECT col_is_pk('mnemo', 'lexicon', ARRAY['tenant_id', 'lexeme'], 'lexicon is keyed by tenant and lexeme');
SELECT ok((SELECT relrowsecurity FROM pg_class WHERE oid = 'mnemo.lexicon'::regclass),
    'lexicon has row-level security');
SELECT has_column('mnemo', 'context_log', 'accounted', 'context_log rows are accounted once');

-- A message's extractive levels (stored by its embed job in messages.levels): none for
-- a short one; for a long one at least a stub, shorter than the text.
SELECT has_column('mnemo', 'messages', 'levels', 'messages store their extractive levels');
SELECT is(mnemo_internal.message_levels('Noted.', 'assistant', 5, 0), NULL,
    'a short message has no levels');
SELECT ok((
    SELECT (l -> 'stub' ->> 'tokens')::integer < mnemo.count_tokens(t)
    FROM (SELECT t, mnemo_internal.message_levels(t, 'user', mnemo.count_tokens(t) + 4, 0) AS l
        FROM (SELECT string_agg(format('Step %s: deploy.sh copies build/app-%s.tar to /srv/app%s '
            'and restarts app%s.service.', i, i, i, i), ' ') AS t
            FROM generate_series(1, 12) AS i) AS x) AS y
), 'a long message has a stub level, shorter than the text');

-- Fixtures: tenant tap_ctx, a session with a system prompt and a short exchange.
SELECT lives_ok($$ SELECT mnemo.create_tenant('tap_ctx') $$, 'tenant created');
SELECT lives_ok($$ SELECT mnemo.start_session('tap_ctx', p_session_id => 'c0000000-0000-4000-8000-000000000001',
    p_context_window => 4096, p_response_reserve => 512, p_system_prompt => 'You are terse.') $$,
    'session with a system prompt');
SELECT lives_ok($$
    SELECT mnemo.record_message('tap_ctx', 'c0000000-0000-4000-8000-000000000001', m)
    FROM jsonb_array_elements('[
        {"role": "user", "content": "Where do invoices live?"},
        {"role": "assistant", "content": "In PostgreSQL, table invoices, since 2024-03-01."},
        {"role": "user", "content": "And who approved that?"}]') AS m
$$, 'three messages recorded');

CREATE TEMP TABLE b AS
SELECT mnemo.compile_context_bundle('tap_ctx', 'c0000000-0000-4000-8000-000000000001') AS bundle;

SELECT is(jsonb_typeof((SELECT bundle -> 'messages' FROM b)), 'array', 'messages is an array');
SELECT is((SELECT bundle -> 'messages' -> 0 FROM b), '{"role": "system", "content": "You are terse."}',
    'the system prompt comes first, verbatim');
SELECT is((SELECT bundle -> 'messages' -> -1 ->> 'content' FROM b), 'And who approved that?',
    'the last user message comes last');
SELECT is((SELECT jsonb_array_length(bundle -> 'messages') FROM b), 4,
    'system prompt + the whole short history');
SELECT is((SELECT ARRAY(SELECT t -> 'function' ->> 'name' FROM jsonb_array_elements(bundle -> 'tools') AS t) FROM b),
    ARRAY['memory_query', 'memory_restore', 'memory_release'], 'the three phantom tools are offered');
SELECT ok((SELECT (bundle #>> '{report,tokens,total}')::int <= (bundle #>> '{report,budget,available}')::int FROM b),
    'tokens used stay within the budget');
SELECT is((SELECT bundle #>> '{report,budget,available}' FROM b)::int,
    4096 - 512 - (SELECT token_count FROM mnemo.system_prompts WHERE tenant_id = 'tap_ctx')
    - (SELECT (bundle #>> '{report,budget,tool_definitions}')::int FROM b),
    'B = window - system prompt - response reserve - tool definitions');
SELECT is((SELECT count(*) FROM mnemo.context_log WHERE tenant_id = 'tap_ctx'), 1::bigint,
    'one compile writes one context_log row') FROM tap_here;
SELECT is((SELECT context_id FROM mnemo.context_log WHERE tenant_id = 'tap_ctx'),
    (SELECT (bundle #>> '{report,context_id}')::bigint FROM b), 'the report names its context_log row');
SELECT is(mnemo.compile_context('tap_ctx', 'c0000000-0000-4000-8000-000000000001', NULL, '{"log": false}'),
    (SELECT bundle -> 'messages' FROM b), 'compile_context returns the bundle''s messages (and log:false logs nothing)');

-- Line tokens (migration 0012): each text's tokens as a memory-block line's text part
-- (space, text, newline), kept by triggers whichever path writes the row.
SELECT has_trigger('mnemo', 'memories', 'memories_line_tokens', 'memories keep their line tokens by trigger');
SELECT has_trigger('mnemo', 'messages', 'messages_line_tokens', 'messages keep their line tokens by trigger');
SELECT is(mnemo_internal.line_tokens(ARRAY['Deploy with make up.', NULL, '']),
    ARRAY[mnemo.count_tokens(' Deploy with make up.' || chr(10)), NULL, mnemo.count_tokens(' ' || chr(10))],
    'line_tokens counts space, text and newline; NULL stays NULL');
SELECT is((SELECT array_agg(line_tokens ORDER BY message_id) FROM mnemo.messages WHERE tenant_id = 'tap_ctx'),
    (SELECT array_agg(mnemo.count_tokens(' ' || content || chr(10)) ORDER BY message_id) FROM mnemo.messages
        WHERE tenant_id = 'tap_ctx' AND content IS NOT NULL HAVING count(*) = 3),
    'record_message stores each message''s line tokens') FROM tap_here;
SELECT lives_ok($$ SELECT mnemo.record_event('tap_ctx', 'c0000000-0000-4000-8000-000000000001', 'decision',
    '{"decision": "Ship on Fridays only after the canary passes."}') $$, 'a decision memory recorded');
SELECT is((SELECT array[line_tokens[1], line_tokens[4]] FROM mnemo.memories WHERE tenant_id = 'tap_ctx'),
    (SELECT array[mnemo.count_tokens(' ' || content_full || chr(10)), mnemo.count_tokens(' ' || content_stub || chr(10))]
        FROM mnemo.memories WHERE tenant_id = 'tap_ctx' AND content_stub IS NOT NULL),
    'a new memory stores the line tokens of its texts') FROM tap_here;
UPDATE mnemo.memories SET content_detail = 'Fridays: canary first.' WHERE tenant_id = 'tap_ctx';
SELECT is((SELECT line_tokens[2] FROM mnemo.memories WHERE tenant_id = 'tap_ctx'),
    mnemo.count_tokens(' Fridays: canary first.' || chr(10)), 'a level written later gets its count') FROM tap_here;

-- Errors: each by SQLSTATE, and nothing logged.
SELECT throws_ok($$ SELECT mnemo.compile_context('tap_ctx', 'c0000000-0000-4000-8000-0000000000ff') $$,
    'MN003', NULL, 'unknown session: MN003');
SELECT throws_ok($$ SELECT mnemo.compile_context('tap_nobody', 'c0000000-0000-4000-8000-000000000001') $$,
    'MN002', NULL, 'unknown tenant: MN002');
SELECT throws_ok($$ SELECT mnemo.compile_context('tap_ctx', 'c0000000-0000-4000-8000-000000000001', NULL, '{"bugdet": 10}') $$,
    'MN001', NULL, 'unknown option: MN001');
SELECT throws_ok($$ SELECT mnemo.compile_context('tap_ctx', 'c0000000-0000-4000-8000-000000000001', NULL, '{"budget": -1}') $$,
    'MN001', NULL, 'negative budget: MN001');
SELECT throws_ok($$ SELECT mnemo.compile_context('tap_ctx', 'c0000000-0000-4000-8000-000000000001', NULL, '{"task_type": "vibes"}') $$,
    'MN001', NULL, 'unknown task type: MN001');
SELECT throws_ok($$ SELECT mnemo.compile_context('tap_ctx', 'c0000000-0000-4000-8000-000000000001', NULL, '{"as_of": "yesterday-ish"}') $$,
    'MN001', NULL, 'as_of that is not a timestamp: MN001');
SELECT is((SELECT count(*) FROM mnemo.context_log WHERE tenant_id = 'tap_ctx'), 1::bigint,
    'failed compiles logged nothing') FROM tap_here;

SELECT * FROM finish();
\ir tap_end.psql
