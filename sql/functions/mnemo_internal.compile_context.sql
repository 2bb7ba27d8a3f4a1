-- mnemo_internal.compile_context(p_tenant_id, p_session_id, p_query, p_options,
--     p_messages_only) -> jsonb
-- The compiler behind mnemo.compile_context (p_messages_only: the messages alone)
-- and mnemo.compile_context_bundle (the whole bundle): plpy/mnemo_db/compile/,
-- loaded once per backend. The API functions reach it through
-- mnemo_internal.call_python, so that its project errors reach clients without
-- PL/Python's class prefix.
CREATE OR REPLACE FUNCTION mnemo_internal.compile_context(
    p_tenant_id text,
    p_session_id uuid,
    p_query text,
    p_options jsonb,
    p_messages_only boolean
) RETURNS jsonb
LANGUAGE plpython3u
VOLATILE
SET search_path = pg_catalog, public, pg_temp
-- The retrieval statements span every partition of two tables. A backend's first
-- compiles plan them for the tenant at hand (custom plans: its hash partition alone);
-- a backend that has compiled many times switches to generic plans for the rest of
-- the call (built once over every partition, pruned at run time; compiler.py,
-- GENERIC_PLANS_AFTER).
SET plan_cache_mode = force_custom_plan
-- Parallel workers take longer to start than the per-tenant scans they would share.
SET max_parallel_workers_per_gather = 0
-- Nor does JIT compilation pay here: a generic plan's row estimates can pass its cost
-- thresholds, and compiling took far longer than the statements run.
SET jit = off
-- A recall index's KNN (statements.RECALL_KNN) asks for k rows, more than ef_search:
-- an iterative scan goes on until it has them (their order is fixed by the compile).
-- At 400 the 10 nearest among them are almost always an exact scan's, for little time
-- (docs/performance.md, "Figures behind code comments").
SET "hnsw.iterative_scan" = relaxed_order
SET "hnsw.ef_search" = 400
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db.compile.compiler import Compiler
compiler = GD.get('mnemo_compiler') or GD.setdefault('mnemo_compiler', Compiler(plpy))
return compiler.compile(p_tenant_id, p_session_id, p_query, p_options, messages_only=p_messages_only)
$$;

COMMENT ON FUNCTION mnemo_internal.compile_context(text, uuid, text, jsonb, boolean) IS
'The context compiler (PL/Python) behind mnemo.compile_context and compile_context_bundle.';
