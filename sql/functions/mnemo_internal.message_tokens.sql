-- mnemo_internal.message_tokens(p_message) -> integer
-- Tokens an OpenAI chat message costs in a prompt: content (text parts; a flat
-- charge per non-text part), name, tool_calls and tool_call_id, plus the per-message
-- framing overhead. See plpy/mnemo_db/tokens.py.
CREATE OR REPLACE FUNCTION mnemo_internal.message_tokens(p_message jsonb)
RETURNS integer
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
import json
from mnemo_db.tokens import count_message
return count_message(json.loads(p_message))
$$;

COMMENT ON FUNCTION mnemo_internal.message_tokens(jsonb) IS
'Prompt tokens of an OpenAI chat message, framing included.';
