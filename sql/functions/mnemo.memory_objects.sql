-- mnemo.memory_objects(p_tenant_id, p_session_id, p_limit) -> jsonb
-- A session's semantic objects as paging sees them now, the
-- newest p_limit (1 to 1000) in turn order: id (obj:N, what memory_restore and
-- memory_release take), kind, label, turns, tokens, fidelity, whether it is pinned
-- (the thrash guard) or anchored, what it reads (a file or URL), and its memory
-- (mem:N) for an object of a recalled memory; with the session's pressure zone, its
-- turn, and the count and tokens of the objects at each fidelity. Reads only.
-- Raises MN001 (session_id missing, limit out of range), MN002, MN003, MN008.
CREATE OR REPLACE FUNCTION mnemo.memory_objects(
    p_tenant_id text,
    p_session_id uuid,
    p_limit integer DEFAULT 200
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('limit must be from 1 to 1000, got %s', coalesce(p_limit::text, 'NULL'));
    END IF;
    RETURN mnemo_internal.call_python('objects', p_tenant_id, p_session_id, jsonb_build_object('limit', p_limit));
END;
$$;

COMMENT ON FUNCTION mnemo.memory_objects(text, uuid, integer) IS
'A session''s semantic objects now: their fidelity, pins, tokens and sources (paging).';
