-- mnemo_internal.message_sentences(p_role, p_content) -> text[]
-- The sentences of a message that its embed job embeds besides the whole turn
-- (mnemo_internal.run_embed_jobs): those of a turn of a role a question can name by
-- its grammatical person (retrieval.SENTENCE_ROLES: the user's), when it has more
-- than one (plpy/mnemo_db/compile/retrieval.py sentences, the one split the compile
-- matches them by); NULL otherwise.
CREATE OR REPLACE FUNCTION mnemo_internal.message_sentences(p_role text, p_content text)
RETURNS text[]
LANGUAGE plpython3u
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
from mnemo_db.compile import retrieval
return retrieval.role_sentences(p_role, p_content) or None
$$;

COMMENT ON FUNCTION mnemo_internal.message_sentences(text, text) IS
'The sentences of a user turn its embed job embeds (retrieval.sentences); NULL when none.';
