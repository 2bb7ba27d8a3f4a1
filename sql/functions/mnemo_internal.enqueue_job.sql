-- mnemo_internal.enqueue_job(p_tenant_id, p_kind, p_dedup_key, p_payload, p_run_after) -> bigint
-- Queues an asynchronous job. Idempotent: while a job with the same (tenant, kind,
-- dedup_key) is still queued, enqueueing again returns that job's id.
-- A caller held to a tenant by row-level security (the API routines, which run as
-- mnemo_api_owner) may queue only the kinds the API queues, and only for the tenant
-- it acts for: the job runner runs as the owner, outside row-level security, and
-- trusts what it finds in the queue. Maintenance code and tests (as the owner) may
-- queue any kind. Raises MN001 (kind), MN008 (another tenant). Writes: mnemo.jobs.
CREATE OR REPLACE FUNCTION mnemo_internal.enqueue_job(
    p_tenant_id text,
    p_kind text,
    p_dedup_key text,
    p_payload jsonb DEFAULT '{}',
    p_run_after timestamptz DEFAULT now()
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_job_id bigint;
BEGIN
    IF row_security_active('mnemo.jobs') THEN
        IF p_kind IS NULL OR p_kind NOT IN ('embed', 'extract') THEN
            RAISE EXCEPTION USING ERRCODE = 'MN001',
                MESSAGE = format('job kind %L cannot be queued by the API', p_kind);
        END IF;
        IF p_tenant_id IS DISTINCT FROM mnemo_internal.current_tenant_id() THEN
            RAISE EXCEPTION USING ERRCODE = 'MN008',
                MESSAGE = format('a job for tenant %L cannot be queued while acting for another', p_tenant_id);
        END IF;
    END IF;
    INSERT INTO mnemo.jobs (tenant_id, kind, dedup_key, payload, run_after)
    VALUES (p_tenant_id, p_kind, p_dedup_key, p_payload, p_run_after)
    ON CONFLICT (tenant_id, kind, dedup_key) WHERE status = 'queued' DO NOTHING
    RETURNING job_id INTO v_job_id;
    IF v_job_id IS NULL THEN
        SELECT j.job_id INTO v_job_id FROM mnemo.jobs AS j
        WHERE j.tenant_id = p_tenant_id AND j.kind = p_kind AND j.dedup_key = p_dedup_key
            AND j.status = 'queued';
    END IF;
    RETURN v_job_id;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.enqueue_job(text, text, text, jsonb, timestamptz) IS
'Queues an async job (idempotent per tenant, kind and dedup key).';
