-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.citus_local_shards(p_tenant_id text) -> jsonb
-- This node's shards of a tenant, for the compile's reads (plpy/mnemo_db/compile/
-- compiler.py, PlpyDatabase): {"mnemo.sessions": "mnemo.sessions_102018", ...}, each
-- Citus table of mnemo and mnemo_internal (partitions aside: a partitioned table's
-- shard holds its partitions' shards) with the shard of its tenant's hash (a
-- reference table: its one shard); NULL unless every one of them is placed on this
-- node, exists here and has its table's row-level security (enabled, forced, the same
-- policies) and the caller's SELECT privilege as on its table.
-- Why: a compile delegated to the tenant's worker read its tables through Citus, each
-- statement planned as a distributed query, deparsed for the shard and planned again
-- at every call (custom plans only on Citus); read from the shards, a statement is
-- planned once, as on one server, and may keep a generic plan (docs/operations.md,
-- "On Citus"). The same rows: a tenant's shards of co-located tables sit on one
-- worker, and Citus's local execution reads these very shards.
-- The compiler checks at each compile that the tenant's shard group is placed here
-- and calls this once per backend and group: a group moved away (a rebalance) is read
-- through Citus again from the next compile on; a compile that found its shards before
-- the move's metadata changed reads the old placement, as a Citus query planned then
-- would: Citus drops a moved shard later, in its cleanup (every 15 s by default,
-- citus.defer_shard_delete_interval), and not while a transaction holds its lock.
CREATE OR REPLACE FUNCTION mnemo_internal.citus_local_shards(p_tenant_id text)
RETURNS jsonb
LANGUAGE sql
STABLE
SET search_path = pg_catalog, public, pg_temp
-- (pg_class shows the shards: Citus hides them from queries of it otherwise)
SET "citus.override_table_visibility" = off
AS $$
WITH t AS (
    SELECT p.logicalrelid AS rel, c.relnamespace, c.relname, c.relrowsecurity, c.relforcerowsecurity,
        (SELECT x.shardid FROM pg_dist_shard AS x WHERE x.logicalrelid = p.logicalrelid
            AND (p.partmethod = 'n' OR worker_hash(p_tenant_id)
                BETWEEN x.shardminvalue::integer AND x.shardmaxvalue::integer)) AS shardid
    FROM pg_dist_partition AS p JOIN pg_class AS c ON c.oid = p.logicalrelid
    WHERE p.partmethod IN ('h', 'n') AND NOT c.relispartition
        AND c.relnamespace IN ('mnemo'::regnamespace, 'mnemo_internal'::regnamespace)
),
s AS (
    SELECT t.*, to_regclass(format('%I.%I', t.relnamespace::regnamespace, t.relname || '_' || t.shardid)) AS shard
    FROM t
    WHERE EXISTS (SELECT FROM pg_dist_placement AS pl WHERE pl.shardid = t.shardid
            AND pl.groupid = (SELECT g.groupid FROM pg_dist_local_group AS g))
)
SELECT jsonb_object_agg(s.rel::text, s.shard::text)
FROM s JOIN pg_class AS c ON c.oid = s.shard
WHERE c.relrowsecurity = s.relrowsecurity AND c.relforcerowsecurity = s.relforcerowsecurity
    -- the caller's privileges on the shard are those on its table (a shard moved here
    -- is created with its table's grants; a read would fail without)
    AND has_table_privilege(s.shard, 'SELECT') = has_table_privilege(s.rel, 'SELECT')
    AND (SELECT array_agg(ARRAY[p.polname::text, p.polcmd::text, p.polpermissive::text, p.polroles::text,
            pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid)] ORDER BY p.polname)
        FROM pg_policy AS p WHERE p.polrelid = s.rel)
        IS NOT DISTINCT FROM (SELECT array_agg(ARRAY[p.polname::text, p.polcmd::text, p.polpermissive::text,
            p.polroles::text, pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid)]
            ORDER BY p.polname) FROM pg_policy AS p WHERE p.polrelid = s.shard)
HAVING count(*) = (SELECT count(*) FROM t)
$$;

COMMENT ON FUNCTION mnemo_internal.citus_local_shards(text) IS
'Citus only: this node''s shards of a tenant ({table: shard}), NULL unless all are here with their row-level security.';
