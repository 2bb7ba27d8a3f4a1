-- mnemo_internal.redact(p_value) -> jsonb
-- Secret redaction on the write path: every string inside p_value (a JSON value:
-- a message, its metadata, a memory's text) has API keys, tokens, passwords,
-- private keys and credentials in connection strings replaced by [REDACTED:<kind>]
-- (patterns in plpy/mnemo_db/redact.py). Returns {"value": the redacted value,
-- "kinds": [kinds found]}; when nothing is found, {"kinds": []} without a value.
CREATE OR REPLACE FUNCTION mnemo_internal.redact(p_value jsonb)
RETURNS jsonb
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
r = GD.get('mnemo_redact')
if r is None:
    plpy.execute('SELECT mnemo_internal.py_bootstrap()')
    from mnemo_db import redact as r
    GD['mnemo_redact'] = r
return r.redact_json_text(p_value)
$$;

COMMENT ON FUNCTION mnemo_internal.redact(jsonb) IS
'Replaces secrets in every string of a JSON value; returns {value, kinds}.';
