-- mnemo_internal.quantize_embeddings(p_embeddings) -> (codes, scales)
-- Vectors concatenated as pgvector sends them (big-endian float4, without the 4-byte
-- header; mnemo_internal.message_segment's embeddings) as int8 codes, 384 bytes a
-- vector, and one big-endian float4 scale per vector: vector = scale x codes, within
-- scale / 2 per component (embedding.quantize_int8). How sealed segments and the
-- live tail hand their vectors to compile_context: a quarter of the bytes to read.
-- Raises MN001 when the bytes are not whole 384-float vectors.
CREATE OR REPLACE FUNCTION mnemo_internal.quantize_embeddings(
    p_embeddings bytea, OUT codes bytea, OUT scales bytea
)
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db import embedding
if len(p_embeddings) % (4 * embedding.DIMENSIONS):
    plpy.error(f'quantize_embeddings needs whole {embedding.DIMENSIONS}-float vectors, '
               f'got {len(p_embeddings)} bytes', sqlstate='MN001')
return embedding.quantize_int8(p_embeddings)
$$;

COMMENT ON FUNCTION mnemo_internal.quantize_embeddings(bytea) IS
'Concatenated float4 vectors (pgvector''s send format) as int8 codes and a scale per vector.';
