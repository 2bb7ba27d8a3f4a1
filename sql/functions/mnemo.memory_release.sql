-- mnemo.memory_release(p_tenant_id, p_session_id, p_ids, p_reason) -> jsonb
-- The memory_release phantom tool (docs/design.md §Phantom tools): the objects the ids name go to
-- stub, or are evicted when the session's last compile was under pressure (any zone
-- but normal). Objects already lower stay where they are.
-- Returns {"released": [{"id", "fidelity"}], "zone"}.
-- Raises MN001 (no ids, malformed id), MN010 (unknown id), MN002, MN003, MN008.
-- Writes: object_residency, fidelity_log.
CREATE OR REPLACE FUNCTION mnemo.memory_release(
    p_tenant_id text,
    p_session_id uuid,
    p_ids text[],
    p_reason text DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    RETURN mnemo_internal.call_python('release', p_tenant_id, p_session_id, jsonb_build_object('ids', to_jsonb(p_ids), 'reason', p_reason));
END;
$$;

COMMENT ON FUNCTION mnemo.memory_release(text, uuid, text[], text) IS
'Phantom tool memory_release: objects the model is done with, to stub (or evicted).';
