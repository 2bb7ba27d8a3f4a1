-- mnemo.compile_context(p_tenant_id, p_session_id, p_query, p_options) -> jsonb
-- The token-budgeted list of OpenAI chat messages for the next model call of a
-- session: system prompt, a memory block, the session summary when history was cut,
-- then the history. Pass it unchanged as `messages` to chat.completions.create.
-- Same arguments, options, errors, settings and context_log row as
-- mnemo.compile_context_bundle, which also returns the phantom tools and the report;
-- the same compiler, which here serialises the messages alone (the report is only
-- logged).
CREATE OR REPLACE FUNCTION mnemo.compile_context(
    p_tenant_id text,
    p_session_id uuid,
    p_query text DEFAULT NULL,
    p_options jsonb DEFAULT '{}'
) RETURNS jsonb
LANGUAGE plpython3u
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
-- as mnemo.compile_context_bundle, for the same reasons
SET plan_cache_mode = force_generic_plan
SET max_parallel_workers_per_gather = 0
-- Nor does JIT compilation pay here: a generic plan's row estimates can pass its cost
-- thresholds, and compiling took ~360 ms for statements that run in a few.
SET jit = off
AS $$
compiler = GD.get('mnemo_compiler')
if compiler is None:
    plpy.execute('SELECT mnemo_internal.py_bootstrap()')
    from mnemo_db.compile.compiler import Compiler
    compiler = GD['mnemo_compiler'] = Compiler(plpy)
return compiler.compile(p_tenant_id, p_session_id, p_query, p_options, messages_only=True)
$$;

COMMENT ON FUNCTION mnemo.compile_context(text, uuid, text, jsonb) IS
'Token-budgeted OpenAI chat messages for the next model call of a session.';
