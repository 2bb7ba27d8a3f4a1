-- mnemo_internal.form_memory(p_tenant_id, p_call, p_args) -> bigint
-- PL/Python entry of the explicit write API, after mnemo.remember / mnemo.correct
-- have validated their input: p_call 'remember' ({content, kind, session_id,
-- options}) or 'correct' ({memory_id, content, reason}). Dedup, conflicts and
-- supersession are the extract job's (plpy/mnemo_db/formation/formation.py). Returns the
-- memory id. Writes: memories and their payloads, versions, links, entities,
-- admission_log.
CREATE OR REPLACE FUNCTION mnemo_internal.form_memory(p_tenant_id text, p_call text, p_args jsonb)
RETURNS bigint
LANGUAGE plpython3u
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
import json
from mnemo_db.formation.formation import Former
former = GD.get('mnemo_former') or GD.setdefault('mnemo_former', Former(plpy))
a = json.loads(p_args)
if p_call == 'remember':
    return former.remember(p_tenant_id, a['content'], a['kind'], a.get('session_id'), a.get('options') or {})
if p_call == 'correct':
    return former.correct(p_tenant_id, a['memory_id'], a['content'], a.get('reason'))
plpy.execute(plpy.prepare('SELECT mnemo_internal.raise_error($1, $2)', ['text', 'text']),
             ['MN001', f'unknown formation call {p_call!r}'])
$$;

COMMENT ON FUNCTION mnemo_internal.form_memory(text, text, jsonb) IS
'Explicit memory writes (remember, correct) through the formation pipeline.';
