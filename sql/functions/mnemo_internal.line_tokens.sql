-- mnemo_internal.line_tokens(p_texts) -> integer[]
-- For each text, the tokens of its part of a memory-block line: the space after the
-- item's label, the text and the newline (tokens.count_line_text). compile_context
-- adds its label's count to get a candidate's line cost exactly, without counting
-- the text again at every compile. NULL elements stay NULL (no such text).
CREATE OR REPLACE FUNCTION mnemo_internal.line_tokens(p_texts text[])
RETURNS integer[]
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db.tokens import count_line_text
return [None if t is None else count_line_text(t) for t in p_texts]
$$;

COMMENT ON FUNCTION mnemo_internal.line_tokens(text[]) IS
'Tokens of each text as the text part of a memory-block line (space, text, newline).';
