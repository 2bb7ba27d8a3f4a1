-- mnemo.embed_batch(p_texts) -> vector(384)[]
-- Embeddings of many texts in one call (batched through the model: several times
-- the throughput of one call per text). Element i embeds p_texts[i]; a NULL text
-- gives a NULL element.
CREATE OR REPLACE FUNCTION mnemo.embed_batch(p_texts text[])
RETURNS vector[]
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db import embedding
present = [i for i, t in enumerate(p_texts) if t is not None]
vecs = embedding.server_embedder(plpy).embed([p_texts[i] for i in present])
out = [None] * len(p_texts)
for row, i in enumerate(present):
    out[i] = embedding.to_pgvector(vecs[row])
return out
$$;

COMMENT ON FUNCTION mnemo.embed_batch(text[]) IS
'Embeddings of an array of texts, batched through the model.';
