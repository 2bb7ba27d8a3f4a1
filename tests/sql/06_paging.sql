-- Paging (issue 22): the phantom tools' and the metrics' signatures, attributes and
-- privileges, the paging tables and their row-level security, and every validation
-- error by SQLSTATE. Behaviour (zones, faults, answers, metrics) is in
-- tests/py/test_paging.py, where it can commit.
\ir tap_begin.psql
SELECT plan(61);

-- Signatures, return types, attributes, privileges ------------------------- 6 * 6
CREATE TEMP TABLE tap_paging_api AS
SELECT f, args::name [] AS args FROM (VALUES
    ('memory_query', ARRAY['text', 'uuid', 'text', 'text', 'integer']),
    ('memory_restore', ARRAY['text', 'uuid', 'text', 'text']),
    ('memory_release', ARRAY['text', 'uuid', 'text[]', 'text']),
    ('handle_tool_call', ARRAY['text', 'uuid', 'jsonb']),
    ('memory_objects', ARRAY['text', 'uuid', 'integer']),
    ('paging_metrics', ARRAY['text', 'uuid', 'timestamp with time zone', 'timestamp with time zone'])
) AS t (f, args);
-- runs: the schema of the routine that runs, mnemo_citus on Citus, behind a wrapper of
-- the same name in mnemo (SECURITY INVOKER; docs/operations.md, "On Citus")
ALTER TABLE tap_paging_api ADD COLUMN runs name;
UPDATE tap_paging_api SET runs = CASE WHEN to_regnamespace('mnemo_citus') IS NOT NULL
    AND to_regprocedure(format('mnemo_citus.%s(%s)', f, array_to_string(args, ', '))) IS NOT NULL
    THEN 'mnemo_citus' ELSE 'mnemo' END;
SELECT has_function('mnemo', f, args, format('mnemo.%s(%s)', f, array_to_string(args, ', ')))
FROM tap_paging_api ORDER BY f;
SELECT function_returns('mnemo', f, args, 'jsonb') FROM tap_paging_api ORDER BY f;
SELECT volatility_is('mnemo', f, args, 'volatile') FROM tap_paging_api ORDER BY f;
SELECT is_definer(runs, f, args, format('mnemo.%s runs as its owner', f)) FROM tap_paging_api ORDER BY f;
SELECT function_owner_is(runs, f, args, 'mnemo_api_owner') FROM tap_paging_api ORDER BY f;
SELECT ok(has_function_privilege('mnemo_app', format('mnemo.%s(%s)', f, array_to_string(args, ', ')), 'EXECUTE'),
    format('mnemo_app may call mnemo.%s', f)) FROM tap_paging_api ORDER BY f;

-- Tables and row-level security --------------------------------------------------- 4
SELECT ok(c.relrowsecurity, format('%s has row-level security', c.oid::regclass))
FROM pg_class AS c WHERE c.oid IN ('mnemo.semantic_objects'::regclass, 'mnemo.object_residency'::regclass,
    'mnemo.object_links'::regclass, 'mnemo.paging_state'::regclass) ORDER BY c.relname;

-- The helper LLM bridge is the owner's, executable by the API owner only ------------- 2
SELECT ok(NOT has_function_privilege('mnemo_app', 'mnemo_internal.helper_answer(jsonb)', 'EXECUTE'),
    'mnemo_app cannot call mnemo_internal.helper_answer');
SELECT ok(has_function_privilege('mnemo_api_owner', 'mnemo_internal.helper_answer(jsonb)', 'EXECUTE'),
    'mnemo_api_owner can call mnemo_internal.helper_answer');

-- Fixture: tenant tap_pg, a session reading one file ---------------------------------
SELECT mnemo.create_tenant('tap_pg');
SELECT mnemo.create_tenant('tap_pg_other');
SELECT mnemo.start_session('tap_pg', p_session_id => 'f0000000-0000-4000-8000-000000000001', p_context_window => 8192);
SELECT mnemo.start_session('tap_pg_other', p_session_id => 'f0000000-0000-4000-8000-000000000002',
    p_context_window => 8192);
SELECT mnemo.record_message('tap_pg', 'f0000000-0000-4000-8000-000000000001',
    '{"role": "user", "content": "Read the config."}');
SELECT mnemo.record_message('tap_pg', 'f0000000-0000-4000-8000-000000000001',
    '{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "Read", "arguments": "{\"file_path\": \"config.toml\"}"}}]}');
SELECT mnemo.record_message('tap_pg', 'f0000000-0000-4000-8000-000000000001',
    '{"role": "tool", "tool_call_id": "c1", "content": "port = 6543\nhost = \"db.internal\""}');
CREATE TEMP TABLE tap_obj AS
SELECT 'obj:' || o.object_id AS ref FROM mnemo.semantic_objects AS o
WHERE o.tenant_id = 'tap_pg' AND o.source_key = 'config.toml';

-- Behaviour in brief ------------------------------------------------------------------ 5
SELECT is((SELECT kind FROM mnemo.semantic_objects WHERE tenant_id = 'tap_pg' AND source_key = 'config.toml'),
    'file_context', 'a file read is a file_context object') FROM tap_here;
SELECT is(mnemo.memory_release('tap_pg', 'f0000000-0000-4000-8000-000000000001', ARRAY[(SELECT ref FROM tap_obj)])
    #>> '{released,0,fidelity}', 'stub', 'memory_release sends it to stub');
SELECT is(mnemo.handle_tool_call('tap_pg', 'f0000000-0000-4000-8000-000000000001',
    jsonb_build_object('id', 'p1', 'type', 'function', 'function', jsonb_build_object(
        'name', 'memory_restore', 'arguments', jsonb_build_object('id', (SELECT ref FROM tap_obj))::text)))
    - 'content', '{"role": "tool", "tool_call_id": "p1"}'::jsonb, 'handle_tool_call answers with a tool message');
SELECT is(mnemo.memory_objects('tap_pg', 'f0000000-0000-4000-8000-000000000001') #> '{objects}'
        @> jsonb_build_array(jsonb_build_object('id', (SELECT ref FROM tap_obj), 'kind', 'file_context',
            'fidelity', 'full', 'pinned', true, 'source', 'config.toml')),
    true, 'memory_objects lists the restored file at full, pinned');
SELECT is(mnemo.memory_objects('tap_pg', 'f0000000-0000-4000-8000-000000000001') #>> '{by_fidelity,full,objects}',
    (SELECT count(*)::text FROM mnemo.object_residency WHERE tenant_id = 'tap_pg' AND fidelity = 'full'),
    'memory_objects counts the objects at each fidelity') FROM tap_here;

-- SQLSTATEs ---------------------------------------------------------------------------- 14
SELECT throws_ok($$ SELECT mnemo.memory_query('tap_pg', NULL, 'x') $$, 'MN001', NULL,
    'memory_query: no session is MN001');
SELECT throws_ok($$ SELECT mnemo.memory_query('tap_pg', 'f0000000-0000-4000-8000-000000000001', '  ') $$, 'MN001',
    NULL, 'memory_query: an empty question is MN001');
SELECT throws_ok($$ SELECT mnemo.memory_query('tap_pg', 'f0000000-0000-4000-8000-000000000001', 'x', NULL, 9) $$,
    'MN001', NULL, 'memory_query: max_tokens below 16 is MN001');
SELECT throws_ok($$ SELECT mnemo.memory_query('tap_nobody', 'f0000000-0000-4000-8000-000000000001', 'x') $$,
    'MN002', NULL, 'memory_query: an unknown tenant is MN002');
SELECT throws_ok($$ SELECT mnemo.memory_restore('tap_pg', 'f0000000-0000-4000-8000-0000000000ff', 'obj:1') $$,
    'MN003', NULL, 'memory_restore: an unknown session is MN003');
SELECT throws_ok($$ SELECT mnemo.memory_restore('tap_pg', 'f0000000-0000-4000-8000-000000000001', 'page 3') $$,
    'MN001', NULL, 'memory_restore: a malformed id is MN001');
SELECT throws_ok($$ SELECT mnemo.memory_restore('tap_pg', 'f0000000-0000-4000-8000-000000000001',
    'obj:999999999') $$, 'MN010', NULL, 'memory_restore: an unknown id is MN010');
SELECT throws_ok(format($$ SELECT mnemo.memory_restore('tap_pg_other', 'f0000000-0000-4000-8000-000000000002',
    %L) $$, (SELECT ref FROM tap_obj)), 'MN010', NULL, 'memory_restore: another tenant''s id is MN010');
SELECT throws_ok($$ SELECT mnemo.memory_release('tap_pg', 'f0000000-0000-4000-8000-000000000001', '{}') $$,
    'MN001', NULL, 'memory_release: no ids is MN001');
SELECT throws_ok($$ SELECT mnemo.handle_tool_call('tap_pg', 'f0000000-0000-4000-8000-000000000001',
    '{"id": "c", "type": "function", "function": {"name": "memory_forget", "arguments": "{}"}}') $$,
    'MN001', NULL, 'handle_tool_call: an unknown tool is MN001');
SELECT throws_ok($$ SELECT mnemo.memory_objects('tap_pg', NULL) $$, 'MN001', NULL,
    'memory_objects: no session is MN001');
SELECT throws_ok($$ SELECT mnemo.memory_objects('tap_pg', 'f0000000-0000-4000-8000-000000000001', 0) $$, 'MN001',
    NULL, 'memory_objects: a limit below 1 is MN001');
SELECT throws_ok($$ SELECT mnemo.memory_objects('tap_pg_other', 'f0000000-0000-4000-8000-000000000001') $$,
    'MN003', NULL, 'memory_objects: another tenant''s session is MN003');
SELECT throws_ok($$ SELECT mnemo.paging_metrics('tap_pg', NULL, '2030-01-01', '2029-01-01') $$,
    'MN001', NULL, 'paging_metrics: since after until is MN001');

SELECT * FROM finish();
\ir tap_end.psql
