-- mnemo_internal.memory_stub(p_content) -> text
-- A memory's stub: the first line of its text, at most 160 characters (its lowest
-- fidelity until the summaries sweep writes better levels). The one definition, used
-- where a memory is stored (insert_memory) and where its text is rewritten in place
-- (the digests sweep, plpy/mnemo_db/lifecycle/digest_statements.py).
CREATE OR REPLACE FUNCTION mnemo_internal.memory_stub(p_content text)
RETURNS text
LANGUAGE sql
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT left(split_part(btrim(p_content), E'\n', 1), 160)
$$;

COMMENT ON FUNCTION mnemo_internal.memory_stub(text) IS
'A memory''s stub: the first line of its text, at most 160 characters.';
