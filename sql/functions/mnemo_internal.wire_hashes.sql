-- mnemo_internal.wire_hashes(p_messages) -> bytea[]
-- SHA-256 of each message of a JSON array as a client sends it, in order: what
-- mnemo.sync_messages compares to find what is new. The hash leaves out what clients
-- rewrite between calls without changing a message (cache_control, thinking blocks,
-- string versus text parts, argument whitespace): plpy/mnemo_db/transcript.py.
CREATE OR REPLACE FUNCTION mnemo_internal.wire_hashes(p_messages jsonb)
RETURNS bytea[]
LANGUAGE plpython3u
IMMUTABLE
STRICT
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if 'mnemo_transcript' not in GD:
    plpy.execute('SELECT mnemo_internal.py_bootstrap()')
    from mnemo_db import transcript
    GD['mnemo_transcript'] = transcript
return GD['mnemo_transcript'].wire_hashes(p_messages)
$$;

COMMENT ON FUNCTION mnemo_internal.wire_hashes(jsonb) IS
'SHA-256 of each message of a JSON array in its wire form (what sync_messages compares).';
