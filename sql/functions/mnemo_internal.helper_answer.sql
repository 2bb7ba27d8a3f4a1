-- mnemo_internal.helper_answer(p_messages) -> jsonb
-- memory_query's answer by the helper LLM (docs/design.md §Phantom tools): posts p_messages (chat
-- messages asking for a JSON object) to the configured endpoint and returns the JSON
-- object it answered, or NULL when no helper is enabled or it gave no usable answer
-- (the caller then answers extractively). SECURITY DEFINER, owned by the deploying
-- superuser, because the helper's configuration and key are readable by the owner
-- only (mnemo_internal.helper_llm, helper_llm_keys): the API (as mnemo_api_owner)
-- gets an answer through it, never the configuration or the key. It reads no tenant
-- data: what it sends is what the caller passed.
CREATE OR REPLACE FUNCTION mnemo_internal.helper_answer(p_messages jsonb)
RETURNS jsonb
LANGUAGE plpython3u
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
import json
from mnemo_db.formation import helper_llm
config = helper_llm.config_from_rows(plpy.execute(helper_llm.CONFIG))
if config is None:
    return None
try:
    reply, _ = helper_llm.chat_json(config, config.get('api_key'), json.loads(p_messages))
except helper_llm.HelperLLMError as e:
    plpy.warning(f'memory_query: the helper LLM gave no answer ({e}); answering extractively')
    return None
return json.dumps(reply)
$$;

COMMENT ON FUNCTION mnemo_internal.helper_answer(jsonb) IS
'The helper LLM''s JSON answer to chat messages (NULL: none configured or no answer).';
