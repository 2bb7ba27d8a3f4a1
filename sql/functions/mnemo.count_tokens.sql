-- mnemo.count_tokens(p_text) -> integer
-- Number of o200k_base tokens in a text (exact, same ids as tiktoken; see
-- plpy/mnemo_db/tokens.py). NULL in, NULL out.
CREATE OR REPLACE FUNCTION mnemo.count_tokens(p_text text)
RETURNS integer
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db import tokens
return tokens.count(p_text)
$$;

COMMENT ON FUNCTION mnemo.count_tokens(text) IS 'o200k_base token count of a text.';
