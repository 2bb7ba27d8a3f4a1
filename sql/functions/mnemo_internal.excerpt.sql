-- mnemo_internal.excerpt(p_text, p_max_bytes, p_artifact_id) -> text
-- Bounded excerpt of a large tool output: head and tail cut at line boundaries and a
-- marker naming the artifact that holds the full bytes (plpy/mnemo_db/excerpt.py).
CREATE OR REPLACE FUNCTION mnemo_internal.excerpt(
    p_text text, p_max_bytes integer, p_artifact_id bigint
)
RETURNS text
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db.excerpt import make_excerpt
return make_excerpt(p_text, p_max_bytes, p_artifact_id)
$$;

COMMENT ON FUNCTION mnemo_internal.excerpt(text, integer, bigint) IS
'Head-and-tail excerpt of a large text, pointing at its artifact.';
