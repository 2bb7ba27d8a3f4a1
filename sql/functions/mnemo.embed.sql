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
if 'mnemo_embedder' not in GD:
    plpy.execute('SELECT mnemo_internal.py_bootstrap()')
    from mnemo_db import embedding
    d = plpy.execute("SELECT mnemo_internal.setting('model_dir') #>> '{}' AS d, "
                     "mnemo_internal.setting('embed_threads') #>> '{}' AS t")[0]
    if not d['d']:
        plpy.error('the model_dir setting is empty', sqlstate='MN011', hint='Run the deploy (make up).')
    GD['mnemo_embedder'] = embedding.get_embedder(d['d'], int(d['t']))
    GD['mnemo_to_pgvector'] = embedding.to_pgvector
return GD['mnemo_to_pgvector'](GD['mnemo_embedder'].embed([p_text])[0])
$$;

COMMENT ON FUNCTION mnemo.embed(text) IS
'384-dimensional all-MiniLM-L6-v2 embedding of a text (L2-normalised).';
