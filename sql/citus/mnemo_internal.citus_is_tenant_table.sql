-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.citus_is_tenant_table(p_table regclass) -> boolean
-- Whether Citus distributes the table by tenant_id (mnemo_internal.citus_distribute):
-- it has a NOT NULL tenant_id and is not one of the registries looked up before a
-- tenant is known (the tenants, role bindings and API keys), which are reference tables.
CREATE OR REPLACE FUNCTION mnemo_internal.citus_is_tenant_table(p_table regclass)
RETURNS boolean
LANGUAGE sql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT p_table NOT IN ('mnemo.tenants'::regclass, 'mnemo_internal.role_tenants'::regclass,
            'mnemo_internal.api_keys'::regclass)
        AND EXISTS (
            SELECT FROM pg_attribute AS a
            WHERE a.attrelid = p_table AND a.attname = 'tenant_id' AND a.attnotnull AND NOT a.attisdropped)
$$;

COMMENT ON FUNCTION mnemo_internal.citus_is_tenant_table(regclass) IS
'Citus only: whether a table is distributed by tenant_id (else it is a reference table).';
