-- mnemo.list_tenants() -> table
-- The tenants the caller can see, with their size: sessions (and how many are
-- active), messages, current memories and the time of their last message. For the
-- `mnemo tenants` command. Row-level security applies: the owner sees every tenant,
-- a role bound to a tenant only its own. Reads only.
CREATE OR REPLACE FUNCTION mnemo.list_tenants()
RETURNS TABLE (
    tenant_id text,
    display_name text,
    created_at timestamptz,
    sessions bigint,
    active_sessions bigint,
    messages bigint,
    memories bigint,
    last_message_at timestamptz
)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT t.tenant_id, t.display_name, t.created_at,
        coalesce(s.n, 0), coalesce(s.active, 0), coalesce(m.n, 0), coalesce(mem.n, 0), m.last_at
    FROM mnemo.tenants AS t
    LEFT JOIN (SELECT x.tenant_id, count(*) AS n, count(*) FILTER (WHERE x.status = 'active') AS active
        FROM mnemo.sessions AS x GROUP BY x.tenant_id) AS s ON s.tenant_id = t.tenant_id
    LEFT JOIN (SELECT x.tenant_id, count(*) AS n, max(x.created_at) AS last_at
        FROM mnemo.messages AS x WHERE x.turn_index >= 0 GROUP BY x.tenant_id) AS m ON m.tenant_id = t.tenant_id
    LEFT JOIN (SELECT x.tenant_id, count(*) AS n FROM mnemo.memories AS x
        WHERE x.is_active AND x.superseded_by IS NULL GROUP BY x.tenant_id) AS mem ON mem.tenant_id = t.tenant_id
    ORDER BY t.tenant_id
$$;

COMMENT ON FUNCTION mnemo.list_tenants() IS
'The tenants the caller can see, with counts of sessions, messages and memories.';
