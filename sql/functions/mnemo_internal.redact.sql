-- mnemo_internal.redact(p_value jsonb) -> jsonb
-- mnemo_internal.redact(p_bytes bytea, OUT bytes bytea, OUT kinds text[])
-- Secret redaction on the write path, the one SQL entry to plpy/mnemo_db/redact.py
-- (which says what counts as a secret). Every write path hands it the text-bearing
-- fields it stores, so no table holds a credential:
--   jsonb: every string inside p_value (a message, its metadata and tags, a memory's
--   text, an event's payload) and every object key has API keys, tokens, passwords,
--   private keys and credentials in connection strings replaced by
--   [REDACTED:<kind>]. Returns {"value": the redacted value, "kinds": [kinds found]};
--   when nothing is found, {"kinds": []} without a value.
--   jsonb[]: each value as the jsonb form does it, in one call (a batch of messages).
--   bytea: artifact bytes (decoded base64): UTF-8 text is redacted as text, other
--   bytes keep every byte but the ASCII secrets inside them.
CREATE OR REPLACE FUNCTION mnemo_internal.redact(p_value jsonb)
RETURNS jsonb
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db.redact import redact_json_text
return redact_json_text(p_value)
$$;

COMMENT ON FUNCTION mnemo_internal.redact(jsonb) IS
'Replaces secrets in every string and key of a JSON value; returns {value, kinds}.';

CREATE OR REPLACE FUNCTION mnemo_internal.redact(p_values jsonb[])
RETURNS jsonb[]
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db.redact import redact_json_text
return [None if v is None else redact_json_text(v) for v in p_values]
$$;

COMMENT ON FUNCTION mnemo_internal.redact(jsonb[]) IS
'mnemo_internal.redact(jsonb) of each value, in one call.';

CREATE OR REPLACE FUNCTION mnemo_internal.redact(p_bytes bytea, OUT bytes bytea, OUT kinds text[])
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db.redact import redact_bytes
out, found = redact_bytes(bytes(p_bytes))
return {"bytes": out, "kinds": found}
$$;

COMMENT ON FUNCTION mnemo_internal.redact(bytea) IS
'Replaces secrets in artifact bytes; returns the bytes and the kinds found.';
