-- mnemo_internal.run_job(p_tenant_id, p_kind, p_payload) -> void
-- Runs one non-embed job. The kinds grow with the lifecycle and extraction work;
-- an unknown kind is an error, so the job is retried and finally marked failed
-- where an operator sees it instead of being silently dropped.
CREATE OR REPLACE FUNCTION mnemo_internal.run_job(p_tenant_id text, p_kind text, p_payload jsonb)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    CASE p_kind
        WHEN 'noop' THEN
            NULL;  -- used by tests and health checks
        WHEN 'extract' THEN
            PERFORM mnemo_internal.extract(p_tenant_id, p_payload);
        WHEN 'record_access' THEN  -- queued by versions before the 'access' sweep
            PERFORM mnemo_internal.record_access(p_tenant_id, (p_payload ->> 'session_id')::uuid);
        WHEN 'fail' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN001',
                MESSAGE = coalesce(p_payload ->> 'message', 'job asked to fail');
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown job kind %L', p_kind);
    END CASE;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.run_job(text, text, jsonb) IS
'Runs one job of a non-embed kind (dispatch by kind).';
