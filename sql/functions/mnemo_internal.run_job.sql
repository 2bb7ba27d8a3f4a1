-- mnemo_internal.run_job(p_tenant_id, p_kind, p_payload) -> jsonb
-- Runs one non-embed job and returns its result (NULL for kinds without one). A
-- result with "continue" asks for another run with that payload (see process_job).
-- 'extract' is formation's job; any other kind K runs mnemo_internal.job_K(p_tenant_id,
-- p_payload) -> jsonb, so a kind is added with its routine file (only the owner can
-- create one there). An unknown kind is an error, so the job is retried and finally
-- marked failed where an operator sees it instead of being silently dropped.
CREATE OR REPLACE FUNCTION mnemo_internal.run_job(p_tenant_id text, p_kind text, p_payload jsonb)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_result jsonb;
BEGIN
    IF p_kind = 'extract' THEN
        RETURN mnemo_internal.extract(p_tenant_id, p_payload);
    END IF;
    IF to_regprocedure(format('mnemo_internal.%I(text, jsonb)', 'job_' || p_kind)) IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown job kind %L', p_kind);
    END IF;
    EXECUTE format('SELECT mnemo_internal.%I($1, $2)', 'job_' || p_kind) INTO v_result USING p_tenant_id, p_payload;
    RETURN v_result;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.run_job(text, text, jsonb) IS
'Runs one job of a non-embed kind (dispatch by kind); returns its result.';
