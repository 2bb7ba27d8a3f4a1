-- mnemo.create_tenant(p_tenant_id, p_display_name, p_config) -> text
-- Registers a tenant (the isolation boundary: a user or a workspace). Idempotent: an
-- existing tenant is kept as it is. Roles bound to a tenant cannot create others.
-- Raises MN001 (bad id or config), MN008 (bound role). Writes: mnemo.tenants.
CREATE OR REPLACE FUNCTION mnemo.create_tenant(
    p_tenant_id text,
    p_display_name text DEFAULT NULL,
    p_config jsonb DEFAULT '{}'
) RETURNS text
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_tenant_id IS NULL OR p_tenant_id !~ '^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('invalid tenant_id %L', p_tenant_id),
            HINT = '1-128 characters: letters, digits and _ . : @ -, starting with a letter or digit.';
    END IF;
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'config must be a JSON object';
    END IF;
    PERFORM mnemo_internal.check_json_depth(p_config, 'config');
    -- The sections the code reads: a wrong shape would fail every later write
    -- (redaction) or compile (scoring) of the tenant, so it is refused here.
    IF coalesce(jsonb_typeof(p_config -> 'redaction'), 'object') <> 'object'
        OR coalesce(jsonb_typeof(p_config #> '{redaction,enabled}'), 'boolean') <> 'boolean'
        OR coalesce(jsonb_typeof(p_config -> 'scoring'), 'object') <> 'object'
        OR jsonb_path_exists(p_config, 'strict $.scoring.* ? (@.type() != "number")', '{}', true)
        OR coalesce(jsonb_typeof(p_config -> 'formation'), 'object') <> 'object'
        OR coalesce(p_config #>> '{formation,method}', 'auto') NOT IN ('auto', 'offline', 'helper_llm', 'off')
        OR coalesce(jsonb_typeof(p_config -> 'recall_scope'), 'string') <> 'string'
        OR coalesce(p_config ->> 'recall_scope', 'tenant') NOT IN ('tenant', 'agent')
        -- the memory block's cap without a budget: tokens, or null for none
        OR coalesce(jsonb_typeof(p_config -> 'memory_cap'), 'null') NOT IN ('number', 'null')
        OR (jsonb_typeof(p_config -> 'memory_cap') = 'number'
            AND (p_config ->> 'memory_cap') !~ '^[0-9]{1,8}$') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'invalid tenant config',
            HINT = 'redaction: {"enabled": boolean}, scoring: {name: number}, '
                'formation: {"method": "auto" | "offline" | "helper_llm" | "off"}, '
                'recall_scope: "tenant" | "agent", memory_cap: tokens (0-99999999) | null';
    END IF;
    IF mnemo_internal.bound_tenant_id() IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN008',
            MESSAGE = 'a role bound to a tenant cannot create tenants';
    END IF;
    PERFORM mnemo_internal.set_tenant(p_tenant_id);
    INSERT INTO mnemo.tenants (tenant_id, display_name, config)
    VALUES (p_tenant_id, p_display_name, p_config)
    ON CONFLICT (tenant_id) DO NOTHING;
    RETURN p_tenant_id;
END;
$$;

COMMENT ON FUNCTION mnemo.create_tenant(text, text, jsonb) IS
'Registers a tenant (idempotent) and returns its id.';
