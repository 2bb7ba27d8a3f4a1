-- mnemo.status() -> jsonb
-- What an operator checks first (`mnemo status`): the server and database, the
-- extensions and their versions, the schema version (migrations applied), the job
-- queue (queued, due, failed, done, oldest queued), the tenants, the on-disk size of
-- each table summed over its partitions and grouped by plane (history, memory,
-- graph, operations; a table this function does not know goes to "other"), and the
-- embedding model: it embeds a word, so a missing or broken model shows here with
-- its error instead of at the first write. The background jobs' runs are
-- mnemo.lifecycle_status(). Admin only (it crosses tenants). Reads only.
CREATE OR REPLACE FUNCTION mnemo.status()
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_embedding jsonb;
BEGIN
    BEGIN
        v_embedding := jsonb_build_object('dims', vector_dims(mnemo.embed('mnemosyne status')));
    EXCEPTION WHEN OTHERS THEN
        v_embedding := jsonb_build_object('error', SQLERRM);
    END;
    RETURN jsonb_build_object(
        'server', current_setting('server_version'),
        'database', current_database(),
        'user', current_user,
        'extensions', (SELECT jsonb_object_agg(e.extname, e.extversion ORDER BY e.extname) FROM pg_extension AS e),
        'schema', (SELECT jsonb_build_object('migrations', count(*), 'latest', max(m.version),
            'applied_at', max(m.applied_at)) FROM mnemo_internal.schema_migrations AS m),
        'tenants', (SELECT count(*) FROM mnemo.tenants),
        'jobs', (SELECT jsonb_build_object(
            'queued', count(*) FILTER (WHERE j.status = 'queued'),
            'due', count(*) FILTER (WHERE j.status = 'queued' AND j.run_after <= now()),
            'failed', count(*) FILTER (WHERE j.status = 'failed'),
            'done', count(*) FILTER (WHERE j.status = 'done'),
            'oldest_queued', min(j.created_at) FILTER (WHERE j.status = 'queued'))
            FROM mnemo.jobs AS j),
        'sizes', (
            SELECT jsonb_object_agg(p.plane, p.tables ORDER BY p.plane)
            FROM (
                SELECT t.plane, jsonb_object_agg(t.name, t.bytes ORDER BY t.name)
                    || jsonb_build_object('total', sum(t.bytes)) AS tables
                FROM (
                    SELECT c.relname::text AS name, CASE WHEN c.relkind = 'p' THEN (
                        SELECT sum(pg_total_relation_size(pt.relid))::bigint FROM pg_partition_tree(c.oid) AS pt
                    ) ELSE pg_total_relation_size(c.oid) END AS bytes,
                    CASE
                        WHEN c.relname IN ('sessions', 'system_prompts', 'messages', 'tool_calls', 'artifacts',
                            'message_segments') THEN 'history'
                        WHEN c.relname IN ('memories', 'memory_access', 'working_memory', 'memory_facts',
                            'memory_decisions', 'memory_tasks', 'memory_versions', 'memory_archive',
                            'lexicon') THEN 'memory'
                        WHEN c.relname IN ('entities', 'entity_aliases', 'entity_mentions', 'entity_edges',
                            'memory_links') THEN 'graph'
                        WHEN c.relname IN ('tenants', 'jobs', 'context_log', 'fault_log', 'fidelity_log',
                            'admission_log', 'compaction_log', 'extraction_state') THEN 'operations'
                        ELSE 'other'
                    END AS plane
                    FROM pg_class AS c
                    WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                ) AS t
                GROUP BY t.plane
            ) AS p),
        'embedding', jsonb_build_object('model', 'all-MiniLM-L6-v2',
            'model_dir', mnemo_internal.setting('model_dir') #>> '{}') || v_embedding
    );
END;
$$;

COMMENT ON FUNCTION mnemo.status() IS
'Server, extensions, schema version, job queue, table sizes per plane and the embedding model (admin).';
