-- mnemo_internal.extract(p_tenant_id, p_payload) -> jsonb
-- Body of the 'extract' job (payload {"session_id"} and optionally "from_turn" /
-- "to_turn"): turns the session's messages after its extraction watermark into
-- memories — offline rules, or the helper LLM when one is configured (retried with
-- backoff, then falling back to offline) — deduplicated, checked for conflicts,
-- scored by admission control. Logic in plpy/mnemo_db/formation/formation.py. Returns counts.
-- Writes: memories and their payload tables, entities, mentions, edges, links,
-- memory_versions, admission_log, extraction_state, lexicon.
CREATE OR REPLACE FUNCTION mnemo_internal.extract(p_tenant_id text, p_payload jsonb)
RETURNS jsonb
LANGUAGE plpython3u
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
import json
from mnemo_db.formation.formation import Former
former = GD.get('mnemo_former') or GD.setdefault('mnemo_former', Former(plpy))
return json.dumps(former.extract_job(p_tenant_id, json.loads(p_payload)))
$$;

COMMENT ON FUNCTION mnemo_internal.extract(text, jsonb) IS
'Extract job: a session''s new messages become deduplicated, admitted memories.';
