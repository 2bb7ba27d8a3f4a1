-- mnemo_internal.page_message(p_tenant_id, p_session_id, p_message, p_tags) -> void
-- Paging's part of record_message, after the message is stored (plpy/mnemo_db/paging/
-- store.py Pager.on_message): the message joins or starts a semantic object (a tool
-- call with its results, a conversation phase), a re-read of a source whose object
-- is below full is a fault, superseded reads, stale and duplicated outputs are
-- degraded, a goal shift re-ranks, and the assistant's cleanup tags (p_tags, from
-- mnemo_internal.paging_tags) are applied. It runs here, in the write's transaction,
-- because faults are what the model asked for at that turn, and the next compile
-- must see the objects: it costs a few statements, and an embedding for a user
-- message (the topic and goal shift cosines).
--   p_message: {message_id, role, content, tool_calls, tool_call_id, turn, tokens, metadata}.
-- Writes: semantic_objects, object_residency, object_links, fidelity_log, fault_log, paging_state.
CREATE OR REPLACE FUNCTION mnemo_internal.page_message(
    p_tenant_id text, p_session_id uuid, p_message jsonb, p_tags jsonb
) RETURNS void
LANGUAGE plpython3u
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db.paging.store import Pager
pager = GD.get('mnemo_pager') or GD.setdefault('mnemo_pager', Pager(plpy))  # its statements prepared once
import json
pager.on_message(p_tenant_id, p_session_id, json.loads(p_message), json.loads(p_tags) if p_tags else None)
$$;

COMMENT ON FUNCTION mnemo_internal.page_message(text, uuid, jsonb, jsonb) IS
'Segments a recorded message into semantic objects; faults, waste, goal shifts, cleanup tags.';
