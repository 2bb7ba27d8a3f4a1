-- mnemo.retry_jobs(p_tenant_id, p_job_ids) -> integer
-- Puts failed jobs back in the queue (`mnemo jobs retry`): status queued, tries 0,
-- due now, error cleared, so the runner takes them on its next pass. All failed
-- jobs, or one tenant's, or the listed ids (which must be failed jobs). A failed job
-- whose twin (same tenant, kind and dedup key) is already queued stays failed: the
-- queued one does its work (and only one of the twins may be queued). Returns how
-- many were queued again. Admin only (it crosses tenants).
-- Raises MN010 when a listed id is not a failed job (nothing is changed then), MN002
-- for an unknown tenant.
-- Writes: mnemo.jobs.
CREATE OR REPLACE FUNCTION mnemo.retry_jobs(
    p_tenant_id text DEFAULT NULL,
    p_job_ids bigint[] DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_missing bigint;
    v_failed bigint[];
    v_count integer;
BEGIN
    IF p_tenant_id IS NOT NULL THEN
        PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    END IF;
    -- the failed jobs among the ids first, then the first id not among them: Citus
    -- refuses the correlated subquery over unnest (0A000) that one query would be
    v_failed := ARRAY(SELECT j.job_id FROM mnemo.jobs AS j WHERE j.job_id = ANY (p_job_ids)
        AND j.status = 'failed' AND (p_tenant_id IS NULL OR j.tenant_id = p_tenant_id));
    SELECT i INTO v_missing FROM unnest(p_job_ids) AS i WHERE i <> ALL (v_failed) LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN010', MESSAGE = format('no failed job %s', v_missing),
            HINT = 'mnemo jobs list --status failed shows the failed jobs';
    END IF;
    UPDATE mnemo.jobs AS j
    SET status = 'queued', tries = 0, run_after = now(), last_error = NULL, finished_at = NULL,
        updated_at = now()
    FROM (
        SELECT DISTINCT ON (f.tenant_id, f.kind, f.dedup_key) f.tenant_id, f.job_id
        FROM mnemo.jobs AS f
        WHERE f.status = 'failed'
            AND (p_tenant_id IS NULL OR f.tenant_id = p_tenant_id)
            AND (p_job_ids IS NULL OR f.job_id = ANY(p_job_ids))
            AND NOT EXISTS (SELECT FROM mnemo.jobs AS q WHERE q.tenant_id = f.tenant_id AND q.kind = f.kind
                AND q.dedup_key = f.dedup_key AND q.status = 'queued')
        ORDER BY f.tenant_id, f.kind, f.dedup_key, f.job_id DESC
    ) AS pick
    WHERE j.tenant_id = pick.tenant_id AND j.job_id = pick.job_id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION mnemo.retry_jobs(text, bigint[]) IS
'Queues failed jobs again (all, one tenant''s, or the given ids) and returns how many (admin).';
