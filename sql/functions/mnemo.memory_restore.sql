-- mnemo.memory_restore(p_tenant_id, p_session_id, p_id, p_reason) -> jsonb
-- The memory_restore phantom tool (docs/design.md §Phantom tools): brings the object an id names
-- (obj:N, msg:N: the object holding that message, mem:N: that memory) back at full
-- fidelity and pins it there for the paging setting's pin_turns turns (thrash guard).
-- A restore is a fault (fault_log, with the fidelity it had).
-- Returns {"id", "kind", "label", "from", "fidelity", "pinned_until_turn", "content", "tokens"}.
-- Raises MN001 (malformed id), MN010 (no such id in this session, or another tenant's),
-- MN002, MN003, MN008. Writes: semantic_objects (a memory's object on first use),
-- object_residency, fidelity_log, fault_log.
CREATE OR REPLACE FUNCTION mnemo.memory_restore(
    p_tenant_id text,
    p_session_id uuid,
    p_id text,
    p_reason text DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    RETURN mnemo_internal.call_python('restore', p_tenant_id, p_session_id, jsonb_build_object('id', p_id, 'reason', p_reason));
END;
$$;

COMMENT ON FUNCTION mnemo.memory_restore(text, uuid, text, text) IS
'Phantom tool memory_restore: an object back at full fidelity, pinned for some turns.';
