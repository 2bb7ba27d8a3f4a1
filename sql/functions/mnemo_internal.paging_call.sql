-- mnemo_internal.paging_call(p_op, p_tenant_id, p_session_id, p_args) -> jsonb
-- The one entry into the paging package (plpy/mnemo_db/paging/store.py), loaded once
-- per backend; p_op names the operation, p_args holds its arguments as JSON:
--   messages  paging's part of record_messages, after the messages are stored, each
--             in order (Pager.on_message; p_args {"messages": [{"message": {message_id,
--             role, content, tool_calls, tool_call_id, turn, tokens, metadata}, "tags":
--             the cleanup tags from mnemo_internal.paging_tags}, ...]}): a message joins or starts a
--             semantic object (a tool call with its results, a conversation phase), a
--             re-read of a source whose object is below full is a fault, superseded
--             reads, stale and duplicated outputs are degraded, and the tags are
--             applied. It runs in the write's transaction, because faults are what the
--             model asked for at that turn, and the next compile must see the objects:
--             a few statements, no embedding. Returns null.
--   embedded  a user message's topic and goal shift, from its embed job once its vector
--             is stored (mnemo_internal.run_embed_jobs; Pager.on_embedded; p_args
--             {"messages": [message_id, ...]}, user messages of the session): a goal
--             shift re-ranks, a topic shift splits the message's phase. Returns null.
--   query | restore | release | handle | objects | metrics: the phantom tools and the
--             metrics. The API functions (mnemo.memory_query, memory_restore,
--             memory_release, handle_tool_call, memory_objects, paging_metrics) reach
--             them through mnemo_internal.call_python, so that their project errors
--             reach clients without PL/Python's prefix.
-- The caller has entered the tenant (the job runner reads every tenant's rows). Raises MN001, MN003, MN010 (see the API functions).
-- Writes: semantic_objects, object_residency, object_links, fidelity_log, fault_log,
-- paging_state.
CREATE OR REPLACE FUNCTION mnemo_internal.paging_call(
    p_op text, p_tenant_id text, p_session_id uuid, p_args jsonb
) RETURNS jsonb
LANGUAGE plpython3u
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db.paging.store import Pager
pager = GD.get('mnemo_pager') or GD.setdefault('mnemo_pager', Pager(plpy))  # its statements prepared once
import json
from mnemo_db.paging.store import PagingError
a = json.loads(p_args) if p_args else {}
try:
    if p_op == 'messages':
        cfg = pager.cfg()  # the settings once for the batch
        for one in a['messages']:
            pager.on_message(p_tenant_id, p_session_id, one['message'], one.get('tags'), cfg)
        out = None
    elif p_op == 'embedded':
        pager.on_embedded(p_tenant_id, p_session_id, a['messages'])
        out = None
    elif p_op == 'query':
        out = pager.query(p_tenant_id, p_session_id, a.get('question'), a.get('scope'), a.get('max_tokens'))
    elif p_op == 'restore':
        out = pager.restore(p_tenant_id, p_session_id, a.get('id'), a.get('reason'))
    elif p_op == 'release':
        out = pager.release(p_tenant_id, p_session_id, a.get('ids'), a.get('reason'))
    elif p_op == 'handle':
        out = pager.handle(p_tenant_id, p_session_id, a.get('tool_call'))
    elif p_op == 'objects':
        out = pager.objects(p_tenant_id, p_session_id, a.get('limit'))
    elif p_op == 'metrics':
        out = pager.metrics(p_tenant_id, p_session_id, a.get('since'), a.get('until'))
    else:
        raise PagingError('MN001', f'unknown paging operation {p_op!r}')
except PagingError as e:
    plpy.execute(plpy.prepare('SELECT mnemo_internal.raise_error($1, $2, $3)', ['text', 'text', 'text']),
                 [e.code, str(e), e.hint])
return json.dumps(out)
$$;

COMMENT ON FUNCTION mnemo_internal.paging_call(text, text, uuid, jsonb) IS
'The paging package behind the phantom tools and paging_metrics.';
