-- Row-level security: a role bound to tenant A (mnemo.bind_role) sees and writes only
-- A's rows, whatever it passes or sets; it writes through the API only, and partitions,
-- internal and admin routines are out of its reach; an unbound service role sees
-- nothing until an API call names a tenant. The API runs as mnemo_api_owner, which the
-- policies hold to the caller's tenant.
-- Roles, tenants and rows are all created inside the transaction and rolled back (on
-- Citus each statement commits on its own, and tap_end.psql removes them: tap_begin.psql).
-- SET ROLE, not SET LOCAL ROLE: each is reset below, and so lasts past a statement on
-- Citus too.
\ir tap_begin.psql
SELECT plan(93);

-- Fixtures (as postgres) --------------------------------------------------------------
-- Tenants A and B; role tap_role_a bound to A; role tap_role_svc unbound. Both LOGIN, as
-- an application's role is: on Citus a role's own reads reach the workers as that role.
CREATE ROLE tap_role_a LOGIN;
GRANT mnemo_app TO tap_role_a;
CREATE ROLE tap_role_svc LOGIN;
GRANT mnemo_app TO tap_role_svc;
-- Regression: mnemo.python_path used to be a placeholder setting that any
-- role may SET, and the first PL/Python call of a backend imports mnemo_db from the
-- directories it names (plpython3u runs as the server's OS user). Must come before any
-- other PL/Python call of this backend (this file's first record_message).
SET ROLE tap_role_svc;
SELECT lives_ok($q$DO $d$
    BEGIN
        BEGIN
            PERFORM set_config('mnemo.python_path', '/nonexistent/tap_pythonpath', true);
        EXCEPTION WHEN insufficient_privilege OR cant_change_runtime_param THEN NULL;
        END;
        PERFORM mnemo.count_tokens('x');
    END $d$$q$, 'a mnemo_app role cannot redirect the PL/Python import path');
RESET ROLE;

SELECT is(mnemo.create_tenant('tap_rls_a'), 'tap_rls_a', 'tenant A');
SELECT is(mnemo.create_tenant('tap_rls_b'), 'tap_rls_b', 'tenant B');
SELECT lives_ok($$SELECT mnemo.bind_role('tap_role_a', 'tap_rls_a')$$, 'tap_role_a is bound to tenant A');

-- A: one session, two messages. B: one session, three messages, one of them a tool
-- output big enough to become an artifact.
UPDATE mnemo_internal.settings SET value = '100' WHERE key = 'artifact_threshold_bytes';
SELECT is(mnemo.start_session('tap_rls_a', p_session_id => 'b0000000-0000-4000-8000-00000000000a'),
    'b0000000-0000-4000-8000-00000000000a'::uuid, 'session in A');
SELECT is(mnemo.start_session('tap_rls_b', p_session_id => 'b0000000-0000-4000-8000-00000000000b'),
    'b0000000-0000-4000-8000-00000000000b'::uuid, 'session in B');
SELECT isnt(mnemo.record_message('tap_rls_a', 'b0000000-0000-4000-8000-00000000000a',
    '{"role": "user", "content": "A: my PIN is 1234"}'), NULL, 'message 1 in A');
SELECT isnt(mnemo.record_message('tap_rls_a', 'b0000000-0000-4000-8000-00000000000a',
    '{"role": "assistant", "content": "Noted."}'), NULL, 'message 2 in A');
SELECT isnt(mnemo.record_message('tap_rls_b', 'b0000000-0000-4000-8000-00000000000b',
    '{"role": "user", "content": "B: read the secret file"}'), NULL, 'message 1 in B');
SELECT isnt(mnemo.record_message('tap_rls_b', 'b0000000-0000-4000-8000-00000000000b',
    '{"role": "assistant", "tool_calls": [{"id": "call_b1", "type": "function",
      "function": {"name": "read_file", "arguments": "{\"path\": \"/secret\"}"}}]}'), NULL, 'message 2 in B');
SELECT isnt(mnemo.record_message('tap_rls_b', 'b0000000-0000-4000-8000-00000000000b',
    jsonb_build_object('role', 'tool', 'tool_call_id', 'call_b1', 'content', repeat('B secret line' || E'\n', 50))),
    NULL, 'message 3 in B (a tool output stored as an artifact)');
-- B's artifact id, readable by the roles below (for the cross-tenant checks).
CREATE TEMP TABLE tap_b_artifact AS
SELECT artifact_id FROM mnemo.artifacts WHERE tenant_id = 'tap_rls_b';
GRANT SELECT ON tap_b_artifact TO PUBLIC;
-- A partition each of mnemo.messages, sessions and artifacts (their first by name), for
-- the checks that no role of the API selects a partition: the names differ (on Citus
-- mnemo.messages has month partitions only, and the hash partitions are as many as the
-- first deploy made).
CREATE TEMP TABLE tap_parts AS
SELECT (SELECT min(i.inhrelid::regclass::text) FROM pg_inherits AS i WHERE i.inhparent = t::regclass) AS p
FROM unnest(ARRAY['mnemo.messages', 'mnemo.sessions', 'mnemo.artifacts']) AS t;
GRANT SELECT ON tap_parts TO PUBLIC;
SELECT is((SELECT count(*)::integer FROM tap_b_artifact), 1, 'B has one artifact');

-- pg_temp.sees_only(tenant, sessions, messages): the acting role reads that tenant's
-- row, that many of its sessions and messages, and no other tenant's: three tests.
CREATE FUNCTION pg_temp.sees_only(p_tenant text, p_sessions integer, p_messages integer)
RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    RETURN NEXT results_eq('SELECT tenant_id FROM mnemo.tenants', ARRAY[p_tenant],
        format('tenants: only %s', p_tenant));
    RETURN NEXT results_eq('SELECT tenant_id, count(*)::integer FROM mnemo.sessions GROUP BY 1',
        format('VALUES (%L, %s)', p_tenant, p_sessions), format('sessions: only %s''s %s', p_tenant, p_sessions));
    RETURN NEXT results_eq('SELECT tenant_id, count(*)::integer FROM mnemo.messages GROUP BY 1',
        format('VALUES (%L, %s)', p_tenant, p_messages), format('messages: only %s''s %s', p_tenant, p_messages));
END
$$;

-- Bound role tap_role_a ----------------------------------------------------------------
SET ROLE tap_role_a;
SELECT is(current_user::text, 'tap_role_a', 'acting as tap_role_a');
SELECT is(mnemo_internal.current_tenant_id(), 'tap_rls_a', 'its tenant is A (its binding)');

-- It sees A's rows, and only those.
SELECT pg_temp.sees_only('tap_rls_a', 1, 2);
SELECT results_eq($$SELECT tenant_id, count(*)::integer FROM mnemo.jobs GROUP BY 1$$,
    $$VALUES ('tap_rls_a', 3)$$, 'jobs: only A''s two embed jobs and its session''s extract job');
SELECT is_empty($$SELECT * FROM mnemo.tool_calls$$, 'tool_calls: none (B''s call is hidden)');
SELECT is_empty($$SELECT * FROM mnemo.artifacts$$, 'artifacts: none (B''s artifact is hidden)');
SELECT results_eq($$SELECT role_name = 'tap_role_a', tenant_id FROM mnemo_internal.role_tenants$$,
    $$VALUES (true, 'tap_rls_a')$$, 'role_tenants: only its own binding');

-- It cannot act for B through the API.
SELECT throws_ok($$SELECT mnemo.record_message('tap_rls_b', 'b0000000-0000-4000-8000-00000000000b',
    '{"role": "user", "content": "sneaky"}')$$, 'MN008', NULL, 'record_message for B -> MN008');
SELECT throws_ok($$SELECT mnemo.start_session('tap_rls_b')$$, 'MN008', NULL, 'start_session for B -> MN008');
SELECT throws_ok($$SELECT mnemo.get_artifact('tap_rls_b', (SELECT artifact_id FROM tap_b_artifact))$$,
    'MN008', NULL, 'get_artifact for B -> MN008');
SELECT throws_ok($$SELECT mnemo.get_artifact('tap_rls_a', (SELECT artifact_id FROM tap_b_artifact))$$,
    'MN010', NULL, 'B''s artifact id under tenant A -> MN010');
SELECT throws_ok($$SELECT mnemo.create_tenant('tap_rls_c')$$, 'MN008', NULL, 'a bound role cannot create tenants');
SELECT throws_ok($$SELECT mnemo.start_session('tap_rls_a',
    p_parent_session_id => 'b0000000-0000-4000-8000-00000000000b')$$, 'MN003', NULL,
    'B''s session cannot be a parent in A (unknown there) -> MN003');

-- It can record into A: the next turn of A's session.
SELECT isnt(mnemo.record_message('tap_rls_a', 'b0000000-0000-4000-8000-00000000000a',
    '{"role": "user", "content": "A again"}'), NULL, 'record_message for A works');
SELECT results_eq($$SELECT turn_index FROM mnemo.messages ORDER BY turn_index$$, ARRAY[0, 1, 2],
    'A''s session now has turns 0, 1, 2');
SELECT isnt(mnemo.start_session('tap_rls_a'), NULL, 'start_session for A works');

-- Setting mnemo.tenant_id to B changes nothing: the binding wins. (SET LOCAL, which
-- Citus forwards to the workers, whose policies read it too, in a transaction block.)
:citus_begin
SET LOCAL mnemo.tenant_id = 'tap_rls_b';
SELECT is(current_setting('mnemo.tenant_id'), 'tap_rls_b', 'tap_role_a sets mnemo.tenant_id = B');
SELECT is(mnemo_internal.current_tenant_id(), 'tap_rls_a', 'its tenant is still A');
SELECT is_empty($$SELECT * FROM mnemo.tenants WHERE tenant_id <> 'tap_rls_a'$$, 'tenants: still none of B');
SELECT is_empty($$SELECT * FROM mnemo.sessions WHERE tenant_id <> 'tap_rls_a'$$, 'sessions: still none of B');
SELECT is_empty($$SELECT * FROM mnemo.messages WHERE tenant_id <> 'tap_rls_a'$$, 'messages: still none of B');
SELECT is_empty($$SELECT * FROM mnemo.jobs WHERE tenant_id <> 'tap_rls_a'$$, 'jobs: still none of B');
SELECT is((SELECT count(*)::integer FROM mnemo.messages), 3, 'messages: A''s three') FROM tap_here;
:citus_commit

-- It writes no table directly (the API does every write): nothing into B, and
-- nothing into A either, such as a context_log row the access sweep cannot parse.
SELECT throws_ok($$INSERT INTO mnemo.sessions (tenant_id) VALUES ('tap_rls_b')$$, '42501', NULL,
    'inserting a session for B -> 42501');
-- (Citus refuses to change a distribution column at all, and before the privileges:
-- 0A000 there)
SELECT throws_ok($$UPDATE mnemo.sessions SET tenant_id = 'tap_rls_b'
    WHERE session_id = 'b0000000-0000-4000-8000-00000000000a'$$,
    CASE WHEN :'tap_citus' THEN '0A000' ELSE '42501' END, NULL,
    'moving A''s session to B -> ' || CASE WHEN :'tap_citus' THEN '0A000' ELSE '42501' END);
SELECT throws_ok($$UPDATE mnemo.sessions SET agent_id = 'hijacked' WHERE tenant_id = 'tap_rls_b'$$, '42501', NULL,
    'updating B''s session -> 42501');
SELECT throws_ok($$DELETE FROM mnemo.messages WHERE tenant_id = 'tap_rls_b'$$, '42501', NULL,
    'deleting B''s messages -> 42501');
SELECT throws_ok($$UPDATE mnemo_internal.role_tenants SET tenant_id = 'tap_rls_b'$$, '42501', NULL,
    'it cannot rebind itself -> 42501');
SELECT throws_ok($$INSERT INTO mnemo.tenants (tenant_id) VALUES ('tap_rls_c')$$, '42501', NULL,
    'inserting a tenant directly -> 42501');
SELECT throws_ok($$INSERT INTO mnemo.context_log (tenant_id, session_id, budget, tokens_used, items)
    VALUES ('tap_rls_a', 'b0000000-0000-4000-8000-00000000000a', 1, 1, '[{"source": "mem:abc"}]')$$,
    '42501', NULL, 'planting a context_log row in A (it stopped the access sweep) -> 42501');
SELECT throws_ok($$INSERT INTO mnemo.jobs (tenant_id, kind, dedup_key) VALUES ('tap_rls_a', 'fail', 'x')$$,
    '42501', NULL, 'queueing a job by hand in A -> 42501');
SELECT throws_ok($$DELETE FROM mnemo.messages$$, '42501', NULL, 'deleting even A''s messages by hand -> 42501');

-- Nor does it call the internal routines the API runs on.
SELECT throws_ok($$SELECT mnemo_internal.setting('model_dir')$$, '42501', NULL,
    'reading a setting -> 42501');
SELECT throws_ok($$SELECT mnemo_internal.enqueue_job('tap_rls_a', 'fail', 'x')$$, '42501', NULL,
    'mnemo_internal.enqueue_job -> 42501');
SELECT throws_ok($$SELECT mnemo_internal.insert_memory('tap_rls_a', NULL, 'fact', 'planted')$$, '42501', NULL,
    'mnemo_internal.insert_memory -> 42501');
SELECT throws_ok($$SELECT mnemo_internal.raise_error('MN001', 'x')$$, '42501', NULL,
    'mnemo_internal.raise_error -> 42501');
SELECT throws_ok($$SELECT mnemo_internal.enter_tenant('tap_rls_a')$$, '42501', NULL,
    'mnemo_internal.enter_tenant -> 42501');

-- Partitions, internal tables and admin routines are denied.
SELECT throws_ok(format('SELECT * FROM %s', p), '42501', NULL, format('selecting %s -> 42501', p))
FROM tap_parts ORDER BY p;
SELECT throws_ok($$SELECT * FROM mnemo_internal.settings$$, '42501', NULL,
    'selecting mnemo_internal.settings -> 42501');
SELECT throws_ok($$SELECT mnemo.bind_role('tap_role_a', 'tap_rls_b')$$, '42501', NULL, 'mnemo.bind_role -> 42501');
SELECT throws_ok($$SELECT mnemo.set_setting('max_message_bytes', '1')$$, '42501', NULL,
    'mnemo.set_setting -> 42501');
SELECT throws_ok($$CALL mnemo.run_jobs()$$, '42501', NULL, 'CALL mnemo.run_jobs -> 42501');
RESET ROLE;

-- Back as postgres: B is untouched.
SELECT is(current_user::text, 'postgres', 'back to postgres');
SELECT results_eq($$SELECT agent_id FROM mnemo.sessions WHERE tenant_id = 'tap_rls_b'$$, ARRAY['default'],
    'B''s session was not updated by tap_role_a');
SELECT is((SELECT count(*)::integer FROM mnemo.messages WHERE tenant_id = 'tap_rls_b'), 3,
    'B''s messages were not deleted by tap_role_a') FROM tap_here;
SELECT is((SELECT count(*)::integer FROM mnemo.sessions WHERE tenant_id = 'tap_rls_b'), 1,
    'no session was added to B') FROM tap_here;

-- Unbound service role tap_role_svc ----------------------------------------------------------
-- The API calls above set mnemo.tenant_id for this transaction; clear it so that the
-- service role starts as a fresh transaction would.
SELECT is(set_config('mnemo.tenant_id', '', true), '', 'mnemo.tenant_id cleared');
SET ROLE tap_role_svc;
SELECT is(mnemo_internal.current_tenant_id(), NULL, 'an unbound role acts for no tenant yet');
SELECT is_empty($$SELECT * FROM mnemo.tenants$$, 'before any API call it sees no tenant');
SELECT is_empty($$SELECT * FROM mnemo.sessions$$, 'before any API call it sees no session');
SELECT is_empty($$SELECT * FROM mnemo.messages$$, 'before any API call it sees no message');
SELECT is_empty($$SELECT * FROM mnemo.jobs$$, 'before any API call it sees no job');
SELECT throws_ok($$INSERT INTO mnemo.sessions (tenant_id) VALUES ('tap_rls_b')$$, '42501', NULL,
    'it cannot write a row itself either -> 42501');

-- An API call for B scopes it to B for the rest of the transaction.
:citus_begin
SELECT is(mnemo.start_session('tap_rls_b', p_session_id => 'b0000000-0000-4000-8000-0000000000b2'),
    'b0000000-0000-4000-8000-0000000000b2'::uuid, 'start_session for B');
SELECT is(mnemo_internal.current_tenant_id(), 'tap_rls_b', 'it now acts for B');
\if :tap_citus
-- Citus refuses this role the shards that start_session (as mnemo_api_owner) wrote in
-- this transaction: the reads below go in a new one, scoped to B by an API call that
-- writes nothing.
COMMIT;
BEGIN;
DO $$ BEGIN PERFORM mnemo.memory_stats('tap_rls_b'); END $$;
\endif
SELECT pg_temp.sees_only('tap_rls_b', 2, 3);
SELECT results_eq($$SELECT DISTINCT tenant_id FROM mnemo.jobs$$, ARRAY['tap_rls_b'], 'jobs: only B''s');
SELECT is(mnemo.get_artifact('tap_rls_b', (SELECT artifact_id FROM tap_b_artifact)),
    convert_to(repeat('B secret line' || E'\n', 50), 'UTF8'), 'it reads B''s artifact');
SELECT isnt(mnemo.record_message('tap_rls_b', 'b0000000-0000-4000-8000-0000000000b2',
    '{"role": "user", "content": "service write"}'), NULL, 'it records into B');
SELECT throws_ok(format('SELECT * FROM %s', p), '42501', NULL,
    'the service role cannot select a partition either -> 42501') FROM tap_parts WHERE p LIKE 'mnemo.messages%';
SELECT throws_ok($$SELECT mnemo.bind_role('tap_role_svc', 'tap_rls_b')$$, '42501', NULL,
    'the service role cannot bind roles -> 42501');
:citus_commit
RESET ROLE;

-- The API runs as mnemo_api_owner, which row-level security holds too ------------------
-- Inside the API, the binding of the role that called it still applies (it is neither
-- current_user nor, under SET ROLE, session_user there).
SELECT is(set_config('mnemo.tenant_id', '', true), '', 'mnemo.tenant_id cleared');
SELECT throws_ok($$SELECT mnemo.bind_role('mnemo_api_owner', 'tap_rls_b')$$, 'MN001', NULL,
    'the role the API runs as cannot be bound (its binding would override every caller''s) -> MN001');
SELECT throws_ok($$SELECT mnemo.bind_role('mnemo_app', 'tap_rls_b')$$, 'MN001', NULL,
    'nor can mnemo_app -> MN001');
SET ROLE mnemo_api_owner;
SELECT is_empty($$SELECT * FROM mnemo.messages$$, 'mnemo_api_owner acting for no tenant sees no row');
:citus_begin
SET LOCAL mnemo.tenant_id = 'tap_rls_a';
SELECT is(current_setting('mnemo.tenant_id'), 'tap_rls_a', 'acting for A');
SELECT results_eq($$SELECT DISTINCT tenant_id FROM mnemo.messages$$, ARRAY['tap_rls_a'],
    'mnemo_api_owner acting for A sees only A''s rows');
-- enqueue_job under row-level security: only the kinds the API queues, only for A.
SELECT throws_ok($$SELECT mnemo_internal.enqueue_job('tap_rls_a', 'fail', 'tap')$$, 'MN001', NULL,
    'enqueue_job of a kind the API never queues -> MN001');
SELECT throws_ok($$SELECT mnemo_internal.enqueue_job('tap_rls_b', 'embed', 'tap',
    '{"target": "memory", "memory_id": 1}')$$, 'MN008', NULL, 'enqueue_job for another tenant -> MN008');
SELECT isnt(mnemo_internal.enqueue_job('tap_rls_a', 'embed', 'tap', '{"target": "memory", "memory_id": 1}'),
    NULL, 'enqueue_job of an embed job for A works');
:citus_commit
RESET ROLE;
SELECT is(set_config('mnemo.tenant_id', '', true), '', 'mnemo.tenant_id cleared');

-- Regression (fixed) -------------------------------------------------------------
-- A login session of tap_role_a may SET ROLE mnemo_app (it is a member), and mnemo_app
-- is not bound to any tenant, so the binding no longer applies: it can act for B.
-- SET SESSION AUTHORIZATION makes tap_role_a the session user, as a login would.
SELECT is(set_config('mnemo.tenant_id', '', true), '', 'mnemo.tenant_id cleared');
:citus_begin
SET LOCAL SESSION AUTHORIZATION tap_role_a;
DO $$
BEGIN
    SET LOCAL ROLE mnemo_app;
EXCEPTION WHEN insufficient_privilege THEN NULL;  -- a fix may refuse the SET ROLE itself
END
$$;
SELECT throws_ok($$SELECT mnemo.record_message('tap_rls_b', 'b0000000-0000-4000-8000-00000000000b',
    '{"role": "user", "content": "via SET ROLE mnemo_app"}')$$, 'MN008', NULL,
    'after SET ROLE mnemo_app, record_message for B -> MN008');
SELECT is(mnemo_internal.current_tenant_id(), 'tap_rls_a', 'after SET ROLE mnemo_app it still acts for A');
\if :tap_citus
-- mnemo_app is NOLOGIN, and Citus reaches the workers as the current role
SELECT skip('Citus: mnemo_app (NOLOGIN) cannot reach the workers, where the sessions are', 1);
\else
SELECT is_empty($$SELECT session_id FROM mnemo.sessions WHERE tenant_id = 'tap_rls_b'$$,
    'after SET ROLE mnemo_app it still sees none of B''s sessions');
\endif
RESET ROLE;
RESET SESSION AUTHORIZATION;
:citus_commit

SELECT * FROM finish();
\ir tap_end.psql
