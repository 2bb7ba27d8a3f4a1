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
if 'mnemo_tokens' not in GD:
    plpy.execute("SELECT mnemo.count_tokens('')")
count = GD['mnemo_tokens'].count_line_text
return [None if t is None else count(t) for t in p_texts]
$$;

COMMENT ON FUNCTION mnemo_internal.line_tokens(text[]) IS
'Tokens of each text as the text part of a memory-block line (space, text, newline).';
