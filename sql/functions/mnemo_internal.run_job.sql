-- The return type changed (void -> jsonb) after release: drop the old version once.
-- Only then: dropping on every deploy would break the cached plans of running job
-- runners ("cache lookup failed for function").
DO $$
BEGIN
    IF (
        SELECT p.prorettype FROM pg_proc AS p
        WHERE p.oid = to_regprocedure('mnemo_internal.run_job(text, text, jsonb)')
    ) = 'void'::regtype THEN
        DROP FUNCTION mnemo_internal.run_job(text, text, jsonb);
    END IF;
END
$$;

-- mnemo_internal.run_job(p_tenant_id, p_kind, p_payload) -> jsonb
-- Runs one non-embed job and returns its result (NULL for kinds without one). A
-- result with "continue" asks for another run with that payload (see process_job).
-- The kinds grow with the lifecycle and extraction work; an unknown kind is an
-- error, so the job is retried and finally marked failed where an operator sees it
-- instead of being silently dropped.
CREATE OR REPLACE FUNCTION mnemo_internal.run_job(p_tenant_id text, p_kind text, p_payload jsonb)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    CASE p_kind
        WHEN 'noop' THEN
            RETURN NULL;  -- used by tests and health checks
        WHEN 'extract' THEN
            RETURN mnemo_internal.extract(p_tenant_id, p_payload);
        WHEN 'record_access' THEN  -- queued by versions before the 'access' sweep
            PERFORM mnemo_internal.record_access(p_tenant_id, (p_payload ->> 'session_id')::uuid);
            RETURN NULL;
        WHEN 'fail' THEN
            RAISE EXCEPTION USING ERRCODE = 'MN001',
                MESSAGE = coalesce(p_payload ->> 'message', 'job asked to fail');
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown job kind %L', p_kind);
    END CASE;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.run_job(text, text, jsonb) IS
'Runs one job of a non-embed kind (dispatch by kind); returns its result.';
