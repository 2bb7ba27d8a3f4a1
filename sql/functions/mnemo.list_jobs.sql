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
    v_limit integer;
BEGIN
    PERFORM mnemo_internal.check_options(p_options, ARRAY['status', 'tenant_id', 'kind', 'limit']);
    IF coalesce(p_options ->> 'status', 'queued') NOT IN ('queued', 'done', 'failed') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown job status %L', p_options ->> 'status'),
            HINT = 'status is one of queued, done, failed';
    END IF;
    v_limit := mnemo_internal.option_limit(p_options, 50, 10000);
    RETURN QUERY
    SELECT j.job_id, j.tenant_id, j.kind, j.status, j.tries, j.run_after, j.created_at, j.updated_at, j.last_error
    FROM mnemo.jobs AS j
    WHERE (NOT p_options ? 'status' OR j.status = p_options ->> 'status')
        AND (NOT p_options ? 'tenant_id' OR j.tenant_id = p_options ->> 'tenant_id')
        AND (NOT p_options ? 'kind' OR j.kind = p_options ->> 'kind')
    ORDER BY j.status = 'failed' DESC, j.updated_at DESC, j.job_id DESC
    LIMIT v_limit;
END;
$$;

COMMENT ON FUNCTION mnemo.list_jobs(jsonb) IS
'The job queue across tenants, failed jobs first (admin).';
