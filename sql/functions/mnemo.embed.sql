-- mnemo.embed(p_text) -> vector(384)
-- all-MiniLM-L6-v2 sentence embedding (ONNX export, see plpy/mnemo_db/embedding.py),
-- L2-normalised; the model loads once per backend. Text beyond 256 word pieces is
-- truncated, as in sentence-transformers. NULL in, NULL out.
CREATE OR REPLACE FUNCTION mnemo.embed(p_text text)
RETURNS vector
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db import embedding
return embedding.to_pgvector(embedding.server_embedder(plpy).embed([p_text])[0])
$$;

COMMENT ON FUNCTION mnemo.embed(text) IS
'384-dimensional all-MiniLM-L6-v2 embedding of a text (L2-normalised).';
