-- mnemo_internal.content_hash(p_content) -> bytea
-- SHA-256 of a memory's normalised text (trimmed, whitespace collapsed, lower case):
-- the exact-duplicate key of docs/design.md §Tiers. The one definition, used by insert_memory
-- and by memory formation (plpy/mnemo_db/formation/formation.py) alike.
CREATE OR REPLACE FUNCTION mnemo_internal.content_hash(p_content text)
RETURNS bytea
LANGUAGE sql
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT sha256(convert_to(lower(regexp_replace(btrim(p_content), '\s+', ' ', 'g')), 'UTF8'))
$$;

COMMENT ON FUNCTION mnemo_internal.content_hash(text) IS
'SHA-256 of normalised memory text (the exact-duplicate key).';
