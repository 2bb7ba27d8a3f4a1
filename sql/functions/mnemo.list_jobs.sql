-- mnemo.list_jobs(p_options) -> table
-- The job queue for an operator (`mnemo jobs list`): jobs of every tenant, failed
-- ones first, then the newest. Admin only (it crosses tenants).
--   p_options: status (queued | done | failed), tenant_id, kind, limit (default 50,
--   1 to 10000).
-- Raises MN001 (bad option). Reads only.
CREATE OR REPLACE FUNCTION mnemo.list_jobs(p_options jsonb DEFAULT '{}')
RETURNS TABLE (
    job_id bigint,
    tenant_id text,
    kind text,
    status text,
    tries integer,
    run_after timestamptz,
    created_at timestamptz,
    updated_at timestamptz,
    last_error text
)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_key text;
BEGIN
    IF p_options IS NULL OR jsonb_typeof(p_options) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options must be a JSON object';
    END IF;
    SELECT k INTO v_key FROM jsonb_object_keys(p_options) AS k
    WHERE k NOT IN ('status', 'tenant_id', 'kind', 'limit') LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown option %L', v_key),
            HINT = 'options: status, tenant_id, kind, limit';
    END IF;
    IF coalesce(p_options ->> 'status', 'queued') NOT IN ('queued', 'done', 'failed') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown job status %L', p_options ->> 'status'),
            HINT = 'status is one of queued, done, failed';
    END IF;
    IF coalesce(jsonb_typeof(p_options -> 'limit'), 'number') <> 'number'
        OR coalesce((p_options ->> 'limit')::numeric, 50) NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options.limit must be a number from 1 to 10000';
    END IF;
    RETURN QUERY
    SELECT j.job_id, j.tenant_id, j.kind, j.status, j.tries, j.run_after, j.created_at, j.updated_at, j.last_error
    FROM mnemo.jobs AS j
    WHERE (NOT p_options ? 'status' OR j.status = p_options ->> 'status')
        AND (NOT p_options ? 'tenant_id' OR j.tenant_id = p_options ->> 'tenant_id')
        AND (NOT p_options ? 'kind' OR j.kind = p_options ->> 'kind')
    ORDER BY j.status = 'failed' DESC, j.updated_at DESC, j.job_id DESC
    LIMIT coalesce((p_options ->> 'limit')::integer, 50);
END;
$$;

COMMENT ON FUNCTION mnemo.list_jobs(jsonb) IS
'The job queue across tenants, failed jobs first (admin).';
