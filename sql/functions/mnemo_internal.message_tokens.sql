-- mnemo_internal.message_tokens(p_message) -> integer
-- Tokens an OpenAI chat message costs in a prompt: content (text parts; a flat
-- charge per non-text part), name, tool_calls and tool_call_id, plus the per-message
-- framing overhead. See plpy/mnemo_db/tokens.py.
-- The array overload counts a batch (record_messages) in one call: each message's
-- tokens, and each text's tokens as the text part of a memory-block line (what
-- mnemo_internal.line_tokens gives messages.line_tokens; NULL for a NULL text).
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

CREATE OR REPLACE FUNCTION mnemo_internal.message_tokens(
    p_messages jsonb[], p_texts text[], OUT tokens integer[], OUT line_tokens integer[]
)
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
import json
from mnemo_db.tokens import count_line_text, count_message
return {"tokens": [count_message(json.loads(m)) for m in p_messages],
        "line_tokens": [None if t is None else count_line_text(t) for t in p_texts]}
$$;

COMMENT ON FUNCTION mnemo_internal.message_tokens(jsonb[], text[]) IS
'Prompt tokens of each message and line tokens of each text, in one call.';
