-- mnemo_internal.paging_tags(p_text) -> jsonb
-- The cleanup tags of an assistant text (plpy/mnemo_db/paging/tags.py):
-- {"tags": [{action, ids, body}], "text": the text without them}, or NULL when it has
-- none. record_message stores the text without its tags (so compile_context never
-- sends them back) and applies them after the message is stored.
CREATE OR REPLACE FUNCTION mnemo_internal.paging_tags(p_text text)
RETURNS jsonb
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
import json
from mnemo_db.paging import tags
found, text = tags.parse(p_text)
if text is None:
    return None
return json.dumps({"tags": [{"action": t.action, "ids": list(t.ids), "body": t.body} for t in found],
                   "text": text})
$$;

COMMENT ON FUNCTION mnemo_internal.paging_tags(text) IS
'Cleanup tags of an assistant text and the text without them (NULL: none).';
