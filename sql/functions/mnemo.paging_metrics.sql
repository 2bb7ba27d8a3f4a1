-- mnemo.paging_metrics(p_tenant_id, p_session_id, p_since, p_until) -> jsonb
-- Paging's metrics for a session (or, p_session_id NULL, all the tenant's sessions)
-- over [p_since, p_until): compiles, the tokens they sent against the full history
-- each would have sent (context_reduction = 1 - sent / full, tokens_saved), the
-- residency transitions (degradations; evictions: to stub or evicted), the faults
-- (re-reads and restores; fault_rate = faults / evictions), the micro-faults and
-- their success (the share not followed by a restore of the same object) and the
-- tokens they saved against restoring. Reads only.
-- Raises MN001 (since after until), MN002, MN003, MN008.
CREATE OR REPLACE FUNCTION mnemo.paging_metrics(
    p_tenant_id text,
    p_session_id uuid DEFAULT NULL,
    p_since timestamptz DEFAULT NULL,
    p_until timestamptz DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    PERFORM mnemo_internal.checked_timestamp(p_since, 'since');
    PERFORM mnemo_internal.checked_timestamp(p_until, 'until');
    IF p_since > p_until THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'since is after until';
    END IF;
    RETURN mnemo_internal.call_python('metrics', p_tenant_id, p_session_id, jsonb_build_object('since', p_since, 'until', p_until));
END;
$$;

COMMENT ON FUNCTION mnemo.paging_metrics(text, uuid, timestamptz, timestamptz) IS
'Paging metrics: context reduction, fault rate, micro-fault success, tokens saved.';
