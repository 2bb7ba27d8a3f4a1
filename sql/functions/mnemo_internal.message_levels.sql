-- mnemo_internal.message_levels(p_content, p_role, p_token_count, p_created_epoch) -> jsonb
-- A stored message's extractive levels {detail|compact|stub: {text, tokens, losses}},
-- exactly as compile_context computes them (plpy/mnemo_db/compile/levels.py message_levels),
-- or NULL when the message is too short to abbreviate. p_created_epoch: its created_at
-- as epoch seconds (the stub's date line must not depend on the session's TimeZone).
-- Called by the embed job (mnemo_internal.store_embedding) to fill mnemo.messages.levels.
CREATE OR REPLACE FUNCTION mnemo_internal.message_levels(
    p_content text, p_role text, p_token_count integer, p_created_epoch float8
) RETURNS jsonb
LANGUAGE plpython3u
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
import json
from mnemo_db.compile import levels, rows
out = levels.message_levels({
    "content": p_content, "role": p_role, "token_count": p_token_count,
    "created_at": rows.utc_datetime(p_created_epoch)})
return json.dumps(out) if out else None
$$;

COMMENT ON FUNCTION mnemo_internal.message_levels(text, text, integer, float8) IS
'Extractive levels of a message (what compile_context degrades older turns to); NULL when short.';
