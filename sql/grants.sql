-- Privileges, run on every deploy after the routines and migrations. Fail closed:
-- every privilege of the two project roles (and PUBLIC) in schemas mnemo and
-- mnemo_internal is revoked, then each gets exactly what this file lists.
--
-- mnemo_app (applications log in as members of it):
--   EXECUTE on the API, by name (mnemo_app_api below), and on the two functions the
--   row-level security policies call; SELECT on the parent tables of mnemo, where
--   the policies show only the tenant it acts for, and on its own binding row.
--   It writes no table directly: the API routines do every write. So no application
--   can plant a row that the API would refuse (a context_log item the access sweep
--   cannot parse, a job of a kind or payload the runner was never meant to take, a
--   memory that skips validation and redaction), for its own tenant or any other.
--   No sequence, no partition, no internal table, no internal or admin routine.
-- mnemo_api_owner (no one logs in as it or is granted it):
--   owns the API routines, which are SECURITY DEFINER, so they run as it. It is not
--   a superuser and does not bypass row-level security, and it owns no table, so
--   every statement of the API is held to the tenant the caller acts for
--   (mnemo_internal.current_tenant_id). It may write the parent tables of mnemo and
--   EXECUTE the internal routines the API needs at run time (mnemo_api_runtime).
-- The deploying superuser keeps the rest: admin routines (bind_role, set_setting,
--   set_helper_llm, create_message_partitions, lifecycle_status), the job runner and
--   the sweeps (run_jobs, process_job_batch, run_sweep, sweep_*), which pg_cron runs
--   as the owner. Trigger functions need no EXECUTE privilege to fire.
-- A routine file loaded again (CREATE OR REPLACE) keeps its owner and grants.

REVOKE ALL ON ALL ROUTINES IN SCHEMA mnemo, mnemo_internal FROM public, mnemo_app, mnemo_api_owner;
REVOKE ALL ON ALL TABLES IN SCHEMA mnemo, mnemo_internal FROM public, mnemo_app, mnemo_api_owner;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA mnemo, mnemo_internal FROM public, mnemo_app, mnemo_api_owner;
GRANT USAGE ON SCHEMA mnemo, mnemo_internal TO mnemo_app, mnemo_api_owner;

DO $$
DECLARE
    -- The application API: the one list of what mnemo_app may call. Each runs as
    -- mnemo_api_owner (SECURITY DEFINER in its file; the schema contract checks both).
    mnemo_app_api CONSTANT text[] := ARRAY[
        'create_tenant', 'start_session', 'record_message', 'record_messages', 'record_event',
        'remember', 'correct', 'forget', 'query_decisions', 'get_artifact',
        'compile_context', 'compile_context_bundle', 'build_acb',
        'list_sessions', 'search', 'export_tenant', 'memory_stats',
        'embed', 'embed_batch', 'count_tokens', 'open_session', 'sync_messages',
        'memory_query', 'memory_restore', 'memory_release', 'handle_tool_call', 'memory_objects',
        'paging_metrics', 'create_api_key', 'list_api_keys', 'revoke_api_key'];
    -- What the policies call when mnemo_app reads a table itself, and the check of a
    -- presented API key a network service makes before it knows the tenant.
    mnemo_app_policy CONSTANT text[] := ARRAY['current_tenant_id', 'bound_tenant_id', 'api_key_tenant'];
    -- The internal routines the API calls while it runs (as mnemo_api_owner).
    mnemo_api_runtime CONSTANT text[] := ARRAY[
        'current_tenant_id', 'bound_tenant_id', 'enter_tenant', 'set_tenant', 'setting', 'raise_error',
        'py_bootstrap', 'enqueue_job', 'insert_memory', 'memory_stub', 'form_memory', 'redact', 'redacted',
        'redaction_enabled', 'content_hash', 'excerpt', 'message_tokens', 'message_levels',
        'line_tokens', 'message_segment', 'segment_hits', 'quantize_embeddings', 'subtract_from_lexicon',
        'compile_context', 'call_python', 'check_json_depth', 'checked_timestamp', 'check_session_model',
        'raise_project_error',
        'next_memory_version', 'wire_hashes', 'check_options', 'option_limit',
        'paging_tags', 'paging_call', 'helper_answer',
        'api_key_tenant', 'message_ids'];
    v_name text;
    v_statement text;
BEGIN
    FOREACH v_name IN ARRAY mnemo_app_api || mnemo_app_policy || mnemo_api_runtime LOOP
        IF NOT EXISTS (SELECT FROM pg_proc AS p WHERE p.proname = v_name
                AND p.pronamespace IN ('mnemo'::regnamespace, 'mnemo_internal'::regnamespace)) THEN
            RAISE EXCEPTION 'grants.sql: no routine named %', v_name;
        END IF;
    END LOOP;
    -- What each list gets, in this order (an API routine changes owner before its grants).
    FOR v_statement IN
        SELECT format(g.statement, p.oid::regprocedure)
        FROM (VALUES
            (1, ARRAY['mnemo'], mnemo_app_api, 'ALTER ROUTINE %s OWNER TO mnemo_api_owner'),
            (2, ARRAY['mnemo'], mnemo_app_api, 'GRANT EXECUTE ON ROUTINE %s TO mnemo_app, mnemo_api_owner'),
            (3, ARRAY['mnemo_internal'], mnemo_app_policy, 'GRANT EXECUTE ON ROUTINE %s TO mnemo_app'),
            (4, ARRAY['mnemo', 'mnemo_internal'], mnemo_api_runtime, 'GRANT EXECUTE ON ROUTINE %s TO mnemo_api_owner')
        ) AS g (step, schemas, names, statement)
        JOIN pg_proc AS p ON p.pronamespace::regnamespace::text = ANY (g.schemas) AND p.proname = ANY (g.names)
        ORDER BY g.step, p.oid
    LOOP
        EXECUTE v_statement;
    END LOOP;
END
$$;

-- On Citus (mnemo_internal.citus_distribute), schema mnemo_citus holds the API routines
-- distributed on their tenant, which the wrappers of the same name in mnemo call (the
-- callers need EXECUTE on both): each gets its wrapper's owner and EXECUTE grants, and
-- the callers EXECUTE on what a wrapper passes for a NULL tenant. No USAGE on the
-- schema on the coordinator (citus_distribute).
DO $$
DECLARE
    v_fn regprocedure;
    v_wrapper regprocedure;
BEGIN
    IF to_regnamespace('mnemo_citus') IS NULL THEN
        RETURN;
    END IF;
    REVOKE ALL ON ALL ROUTINES IN SCHEMA mnemo_citus FROM public, mnemo_app, mnemo_api_owner;
    FOR v_fn, v_wrapper IN
        SELECT p.oid, w.oid FROM pg_proc AS p
        JOIN pg_proc AS w ON w.pronamespace = 'mnemo'::regnamespace AND w.proname = p.proname
            AND w.proargtypes = p.proargtypes
        WHERE p.pronamespace = 'mnemo_citus'::regnamespace
    LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO %I', v_fn,
            (SELECT r.rolname FROM pg_proc AS w JOIN pg_roles AS r ON r.oid = w.proowner WHERE w.oid = v_wrapper));
        IF has_function_privilege('mnemo_app', v_wrapper, 'EXECUTE') THEN
            EXECUTE format('GRANT EXECUTE ON ROUTINE %s TO mnemo_app, mnemo_api_owner', v_fn);
        END IF;
    END LOOP;
    GRANT EXECUTE ON FUNCTION mnemo_internal.citus_no_tenant() TO mnemo_app, mnemo_api_owner;
    GRANT EXECUTE ON FUNCTION mnemo_internal.citus_api_key_set() TO mnemo_app, mnemo_api_owner;
    -- the compile's look-up of its tenant's shards on the node it runs on (compiler.py)
    GRANT EXECUTE ON FUNCTION mnemo_internal.citus_local_shards(text) TO mnemo_api_owner;
END
$$;

-- Tables: the parents only, never the partitions, so no one reads around the policies.
DO $$
DECLARE
    v_table regclass;
BEGIN
    FOR v_table IN
        SELECT c.oid::regclass FROM pg_class AS c
        WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p')
            AND NOT c.relispartition
    LOOP
        EXECUTE format('GRANT SELECT ON %s TO mnemo_app', v_table);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO mnemo_api_owner', v_table);
    END LOOP;
END
$$;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA mnemo TO mnemo_api_owner;
GRANT SELECT ON mnemo_internal.role_tenants TO mnemo_app, mnemo_api_owner;
GRANT SELECT ON mnemo_internal.settings TO mnemo_api_owner;
-- API keys: created, listed and revoked by the API (under the tenant policy).
GRANT SELECT, INSERT, UPDATE ON mnemo_internal.api_keys TO mnemo_api_owner;
-- compile_context reads a large tenant's recall index (each statement names the tenant).
GRANT SELECT ON mnemo_internal.recall_index, mnemo_internal.recall_tenants TO mnemo_api_owner;
