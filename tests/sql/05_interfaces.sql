-- The functions behind the CLI and the MCP server (issue 24): signatures, what they
-- return on a small fixture, and every validation error by SQLSTATE. Behaviour
-- through the interfaces themselves is in tests/py/db/test_cli.py and test_mcp.py.
\ir tap_begin.psql
SELECT plan(49);

-- Signatures ------------------------------------------------------------------ 9
SELECT has_function('mnemo', f, args::name [], format('mnemo.%s(%s)', f, array_to_string(args, ', ')))
FROM (VALUES
    ('list_tenants', ARRAY[]::text []),
    ('list_sessions', ARRAY['text', 'jsonb']),
    ('search', ARRAY['text', 'text', 'jsonb']),
    ('export_tenant', ARRAY['text']),
    ('memory_stats', ARRAY['text', 'uuid']),
    ('build_acb', ARRAY['text', 'uuid', 'text', 'integer', 'text', 'text', 'text', 'jsonb']),
    ('status', ARRAY[]::text []),
    ('list_jobs', ARRAY['jsonb']),
    ('retry_jobs', ARRAY['text', 'bigint[]'])
) AS t (f, args);

-- Fixture: tenant tap_if, one session with a prompt, two turns, a remembered fact.
SELECT mnemo.create_tenant('tap_if');
SELECT mnemo.start_session('tap_if', p_session_id => 'e0000000-0000-4000-8000-000000000001',
    p_system_prompt => 'You are terse.', p_context_window => 8192);
SELECT mnemo.record_message('tap_if', 'e0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "The staging database runs on port 6543."}');
SELECT mnemo.record_message('tap_if', 'e0000000-0000-4000-8000-000000000001',
    '{"role": "assistant", "content": "Noted: staging on 6543."}');
SELECT mnemo.remember('tap_if', 'The deploy target is Fly.io', 'fact',
    p_options => '{"tags": ["ops"], "fact": {"subject": "deploy", "predicate": "target", "object": "Fly.io"}}');

-- list_tenants / list_sessions -------------------------------------------------- 7
SELECT results_eq($$ SELECT sessions, messages, memories FROM mnemo.list_tenants() WHERE tenant_id = 'tap_if' $$,
    $$ VALUES (1::bigint, 2::bigint, 1::bigint) $$, 'list_tenants counts the sessions, messages and memories');
SELECT results_eq($$ SELECT session_id, messages FROM mnemo.list_sessions('tap_if') $$,
    $$ VALUES ('e0000000-0000-4000-8000-000000000001'::uuid, 2::bigint) $$, 'list_sessions lists the session');
SELECT is_empty($$ SELECT * FROM mnemo.list_sessions('tap_if', '{"status": "closed"}') $$,
    'list_sessions filters by status');
SELECT throws_ok($$ SELECT * FROM mnemo.list_sessions('tap_if', '{"colour": 1}') $$, 'MN001', NULL,
    'list_sessions: an unknown option is MN001');
SELECT throws_ok($$ SELECT * FROM mnemo.list_sessions('tap_if', '{"status": "asleep"}') $$, 'MN001', NULL,
    'list_sessions: an unknown status is MN001');
SELECT throws_ok($$ SELECT * FROM mnemo.list_sessions('tap_if', '{"session_id": "nope"}') $$, 'MN001', NULL,
    'list_sessions: a session_id that is not a UUID is MN001');
SELECT throws_ok($$ SELECT * FROM mnemo.list_sessions('tap_nobody') $$, 'MN002', NULL,
    'list_sessions: an unknown tenant is MN002');

-- search ---------------------------------------------------------------------- 8
SELECT is((SELECT source FROM mnemo.search('tap_if', 'deploy target') LIMIT 1),
    'mem:' || (SELECT max(memory_id) FROM mnemo.memories WHERE tenant_id = 'tap_if'
        AND content_full = 'The deploy target is Fly.io'),
    'search ranks the remembered fact first for its own words') FROM tap_here;
SELECT ok((SELECT bool_and(score BETWEEN -1 AND 1.01 AND lexical >= 0) FROM mnemo.search('tap_if', 'staging port')),
    'search returns its scores');
SELECT ok((SELECT bool_and(source LIKE 'msg:%') FROM mnemo.search('tap_if', 'staging', '{"sources": ["messages"]}')),
    'search: sources limits the retrievers');
SELECT is((SELECT count(*) FROM mnemo.search('tap_if', 'staging', '{"limit": 1}')), 1::bigint,
    'search: limit bounds the results');
SELECT throws_ok($$ SELECT * FROM mnemo.search('tap_if', '  ') $$, 'MN001', NULL, 'search: an empty query is MN001');
SELECT throws_ok($$ SELECT * FROM mnemo.search('tap_if', 'x', '{"limit": 0}') $$, 'MN001', NULL,
    'search: a limit out of range is MN001');
SELECT throws_ok($$ SELECT * FROM mnemo.search('tap_if', 'x', '{"sources": ["files"]}') $$, 'MN001', NULL,
    'search: an unknown source is MN001');
SELECT throws_ok($$ SELECT * FROM mnemo.search('tap_nobody', 'x') $$, 'MN002', NULL,
    'search: an unknown tenant is MN002');

-- export_tenant ----------------------------------------------------------------- 5
SELECT results_eq($$ SELECT line ->> 'type' FROM mnemo.export_tenant('tap_if') AS line $$,
    $$ VALUES ('tenant'), ('session'), ('message'), ('message'), ('memory') $$,
    'export_tenant: the tenant, its session, its messages in order, its explicit memory');
SELECT is((SELECT line ->> 'system_prompt' FROM mnemo.export_tenant('tap_if') AS line WHERE line ->> 'type' = 'session'),
    'You are terse.', 'export_tenant: the session carries its system prompt');
SELECT is((SELECT line -> 'options' -> 'fact' FROM mnemo.export_tenant('tap_if') AS line WHERE line ->> 'type' = 'memory'),
    '{"subject": "deploy", "predicate": "target", "object": "Fly.io"}'::jsonb,
    'export_tenant: a fact keeps its subject, predicate and object');
SELECT is_empty($$ SELECT FROM mnemo.export_tenant('tap_if') AS line
    WHERE line ->> 'type' = 'memory' AND line ->> 'content' LIKE '%6543%' $$,
    'export_tenant: memories extracted from the messages are derived, not exported');
SELECT throws_ok($$ SELECT * FROM mnemo.export_tenant('tap_nobody') $$, 'MN002', NULL,
    'export_tenant: an unknown tenant is MN002');

-- memory_stats ------------------------------------------------------------------ 4
SELECT is((mnemo.memory_stats('tap_if') #>> '{messages,count}')::integer, 2, 'memory_stats counts the messages');
SELECT ok((mnemo.memory_stats('tap_if') #> '{memories,by_tier}') ?& ARRAY['session', 'episodic', 'semantic', 'procedural'],
    'memory_stats counts the memories per tier');
SELECT throws_ok($$ SELECT mnemo.memory_stats('tap_if', 'e0000000-0000-4000-8000-0000000000ff') $$, 'MN003', NULL,
    'memory_stats: an unknown session is MN003');
SELECT throws_ok($$ SELECT mnemo.memory_stats('tap_nobody') $$, 'MN002', NULL,
    'memory_stats: an unknown tenant is MN002');

-- build_acb --------------------------------------------------------------------- 7
CREATE TEMP TABLE tap_acb AS
SELECT mnemo.build_acb('tap_if', 'e0000000-0000-4000-8000-000000000001', 'deploy target', 2000, NULL, 'knowledge',
    'tap-agent', '{"log": false}') AS b;
SELECT ok((SELECT b ?& ARRAY['acb_id', 'budget_tokens', 'token_used_est', 'sections', 'omissions', 'provenance',
    'messages', 'tools'] FROM tap_acb), 'build_acb has the bundle''s keys and the messages');
SELECT is((SELECT (b ->> 'budget_tokens')::integer FROM tap_acb), 2000, 'build_acb: max_tokens is the budget');
SELECT is((SELECT jsonb_agg(s ->> 'name') FROM tap_acb, jsonb_array_elements(b -> 'sections') AS s),
    '["rules", "recent_window", "retrieved_evidence"]'::jsonb, 'build_acb: rules, recent window, evidence');
SELECT is((SELECT b #>> '{sections,0,items,0,text}' FROM tap_acb), 'You are terse.', 'build_acb: the rules are the system prompt');
SELECT is((SELECT b #> '{sections,1,items,0,refs}' FROM tap_acb),
    jsonb_build_array('msg:' || (SELECT min(message_id) FROM mnemo.messages WHERE tenant_id = 'tap_if')),
    'build_acb: a history item refers to its message');
SELECT is((SELECT b #>> '{provenance,intent}' FROM tap_acb) || '/' || (SELECT b #>> '{provenance,task_type}' FROM tap_acb),
    'knowledge/knowledge', 'build_acb: an intent that names a task type sets it');
SELECT throws_ok($$ SELECT mnemo.build_acb('tap_if', 'e0000000-0000-4000-8000-000000000001', NULL, NULL, NULL, NULL,
    NULL, '[]') $$, 'MN001', NULL, 'build_acb: options that are not an object are MN001');

-- status, list_jobs, retry_jobs (admin) ----------------------------------------- 6
SELECT ok(mnemo.status() ?& ARRAY['server', 'extensions', 'schema', 'jobs', 'sizes', 'embedding'],
    'status reports server, extensions, schema, jobs, sizes and the embedding model');
SELECT is((mnemo.status() #>> '{embedding,dims}')::integer, 384, 'status: the embedding model loads');
UPDATE mnemo.jobs SET status = 'failed', last_error = 'tap: boom', tries = 5 WHERE tenant_id = 'tap_if';
SELECT ok((SELECT bool_and(status = 'failed') FROM mnemo.list_jobs('{"tenant_id": "tap_if"}')),
    'list_jobs lists a tenant''s failed jobs');
SELECT throws_ok($$ SELECT * FROM mnemo.list_jobs('{"status": "lost"}') $$, 'MN001', NULL,
    'list_jobs: an unknown status is MN001');
SELECT throws_ok($$ SELECT mnemo.retry_jobs(NULL, ARRAY[-1]::bigint []) $$, 'MN010', NULL,
    'retry_jobs: an id that is not a failed job is MN010');
SELECT is(mnemo.retry_jobs('tap_if'), (SELECT count(DISTINCT (kind, dedup_key))::integer FROM mnemo.jobs
    WHERE tenant_id = 'tap_if'), 'retry_jobs queues one job per failed (kind, dedup key) again') FROM tap_here;

-- A paused pg_cron job never works, even when pg_cron's cached job list still runs it:
-- the runners look the command up in cron.job (mnemo_internal.paused_cron_run).
SELECT cron.schedule('mnemo-test-paused', '* * * * *', $$CALL mnemo.run_sweep('segments', p_max_batches => 3)$$);
UPDATE cron.job SET active = false WHERE jobname = 'mnemo-test-paused';
SELECT ok(mnemo_internal.paused_cron_run($$CALL mnemo.run_sweep('segments', p_max_batches => 3)$$),
    'a paused job''s command is a paused run');
UPDATE cron.job SET active = true WHERE jobname = 'mnemo-test-paused';
SELECT ok(NOT mnemo_internal.paused_cron_run($$CALL mnemo.run_sweep('segments', p_max_batches => 3)$$),
    'an active job''s command is not');
UPDATE cron.job SET active = false WHERE jobname = 'mnemo-test-paused';
SELECT ok(NOT mnemo_internal.paused_cron_run(), 'a backend that is not pg_cron''s always runs');

SELECT * FROM finish();
\ir tap_end.psql
