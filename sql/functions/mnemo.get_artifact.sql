-- mnemo.get_artifact(p_tenant_id, p_artifact_id) -> bytea
-- The full bytes of an artifact (e.g. a large tool output whose message keeps an
-- excerpt), byte-exact. Raises MN002 (unknown tenant), MN010 (no such artifact).
CREATE OR REPLACE FUNCTION mnemo.get_artifact(p_tenant_id text, p_artifact_id bigint)
RETURNS bytea
LANGUAGE plpgsql
STABLE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_bytes bytea;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    SELECT a.bytes INTO v_bytes FROM mnemo.artifacts AS a
    WHERE a.tenant_id = p_tenant_id AND a.artifact_id = p_artifact_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'MN010',
            MESSAGE = format('no artifact %s for tenant %L', p_artifact_id, p_tenant_id);
    END IF;
    RETURN v_bytes;
END;
$$;

COMMENT ON FUNCTION mnemo.get_artifact(text, bigint) IS 'Full bytes of an artifact.';
