-- Schema contract: schemas, tables, partitioning, keys, indexes, row-level security,
-- the API's signatures, volatility and privileges, and the hygiene of every routine.
-- Catalog checks only; nothing is written (and the transaction is rolled back).
BEGIN;
SELECT plan(245);
-- On Citus (make test-citus) mnemo.messages has one level, by month (Citus distributes
-- one partition level; the shards are the tenant level) and mnemo_api_owner logs in
-- (Citus reaches the workers as it): those checks skip there (docs/operations.md).
SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') AS tap_citus \gset

-- The tenant tables of 0001_schema.sql (21) and 0003_lifecycle.sql (2), all
-- hash-partitioned by tenant_id.
CREATE TEMP TABLE tap_tenant_tables ON COMMIT DROP AS
SELECT t AS tab FROM unnest(ARRAY[
    'system_prompts', 'sessions', 'messages', 'tool_calls', 'artifacts', 'memories',
    'working_memory', 'memory_facts', 'memory_decisions', 'memory_tasks', 'memory_versions',
    'entities', 'entity_aliases', 'entity_mentions', 'entity_edges', 'memory_links',
    'jobs', 'context_log', 'fault_log', 'fidelity_log', 'admission_log',
    'compaction_log', 'memory_archive', 'memory_access'
]::name []) AS t;

-- Schemas ------------------------------------------------------------------------ 2
SELECT has_schema('mnemo');
SELECT has_schema('mnemo_internal');

-- Tables --------------------------------------------------------------------- 24 + 5
SELECT has_table('mnemo', tab, format('table mnemo.%s exists', tab))
FROM tap_tenant_tables ORDER BY tab;
SELECT has_table('mnemo', 'tenants', 'table mnemo.tenants exists');
SELECT has_table('mnemo_internal', 'role_tenants', 'table mnemo_internal.role_tenants exists');
SELECT has_table('mnemo_internal', 'settings', 'table mnemo_internal.settings exists');
SELECT has_table('mnemo_internal', 'error_codes', 'table mnemo_internal.error_codes exists');
SELECT has_table('mnemo_internal', 'schema_migrations', 'table mnemo_internal.schema_migrations exists');

-- Partitioning ---------------------------------------------------------------- 23 x 2
-- Each tenant table is partitioned BY HASH on exactly (tenant_id) ...
SELECT ok(
    EXISTS (
        SELECT FROM pg_partitioned_table AS pt
        JOIN pg_attribute AS a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
        WHERE pt.partrelid = format('mnemo.%I', tab)::regclass
            AND pt.partstrat = 'h' AND pt.partnatts = 1 AND a.attname = 'tenant_id'),
    format('mnemo.%s is partitioned by hash (tenant_id)', tab))
FROM tap_tenant_tables WHERE NOT (:'tap_citus'::boolean AND tab = 'messages') ORDER BY tab;
SELECT skip('Citus: mnemo.messages is partitioned by month only', 1) WHERE :'tap_citus'::boolean;

-- ... into the configured number of hash partitions (setting 'hash_partitions').
SELECT is(
    (SELECT count(*)::integer FROM pg_inherits WHERE inhparent = format('mnemo.%I', tab)::regclass),
    (SELECT value::integer FROM mnemo_internal.settings WHERE key = 'hash_partitions'),
    format('mnemo.%s has hash_partitions partitions', tab))
FROM tap_tenant_tables WHERE NOT (:'tap_citus'::boolean AND tab = 'messages') ORDER BY tab;
SELECT skip('Citus: mnemo.messages is partitioned by month only', 1) WHERE :'tap_citus'::boolean;

\if :tap_citus
SELECT skip('Citus: mnemo.messages is partitioned by month only, without the hash level', 4);
\else
-- No other table of schema mnemo carries tenant_id without being hash-partitioned
-- (mnemo.tenants itself excepted).                                                    1
SELECT is_empty($$
    SELECT c.oid::regclass::text FROM pg_class AS c
    WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p')
        AND NOT c.relispartition AND c.relname <> 'tenants'
        AND EXISTS (SELECT FROM pg_attribute AS a
            WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
        AND NOT EXISTS (SELECT FROM pg_partitioned_table AS pt
            WHERE pt.partrelid = c.oid AND pt.partstrat = 'h')
$$, 'every tenant table in schema mnemo is hash-partitioned');

-- The hash partitions of mnemo.messages are each range-partitioned by created_at,
-- with a DEFAULT partition and a partition for the current month.                     3
SELECT is_empty($$
    SELECT i.inhrelid::regclass::text FROM pg_inherits AS i
    WHERE i.inhparent = 'mnemo.messages'::regclass
        AND NOT EXISTS (
            SELECT FROM pg_partitioned_table AS pt
            JOIN pg_attribute AS a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
            WHERE pt.partrelid = i.inhrelid AND pt.partstrat = 'r' AND pt.partnatts = 1
                AND a.attname = 'created_at')
$$, 'every hash partition of mnemo.messages is partitioned by range (created_at)');
SELECT is_empty($$
    SELECT i.inhrelid::regclass::text FROM pg_inherits AS i
    WHERE i.inhparent = 'mnemo.messages'::regclass
        AND NOT EXISTS (
            SELECT FROM pg_inherits AS s JOIN pg_class AS c ON c.oid = s.inhrelid
            WHERE s.inhparent = i.inhrelid
                AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT')
$$, 'every hash partition of mnemo.messages has a DEFAULT partition');
SELECT is_empty($$
    SELECT i.inhrelid::regclass::text FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'mnemo.messages'::regclass
        AND to_regclass(format('mnemo.%I', c.relname || '_' || to_char(now(), 'YYYYMM'))) IS NULL
$$, 'every hash partition of mnemo.messages has a partition for the current month');
\endif

-- Persistence: working memory is UNLOGGED, all other partitions are logged.           3
SELECT is_empty($$
    SELECT i.inhrelid::regclass::text FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'mnemo.working_memory'::regclass AND c.relpersistence <> 'u'
$$, 'every partition of mnemo.working_memory is UNLOGGED');
SELECT isnt(
    (SELECT count(*)::integer FROM pg_inherits WHERE inhparent = 'mnemo.working_memory'::regclass),
    0, 'mnemo.working_memory has partitions');
SELECT is_empty($$
    SELECT c.oid::regclass::text FROM pg_class AS c
    WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relispartition
        AND c.relpersistence <> 'p' AND c.relname NOT LIKE 'working\_memory\_%'
$$, 'all other partitions in schema mnemo are logged (durable)');

-- Storage: rows with an embedding stay inline up to a page (no TOAST lookup per row
-- in the exact vector scans), on every leaf, the month partitions included; memories
-- leave room for HOT updates; context_log compresses with lz4.                          6
SELECT is_empty($$
    SELECT c.oid::regclass::text FROM pg_class AS c
    WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relispartition AND c.relkind = 'r'
        AND (c.relname LIKE 'messages\_%' OR c.relname LIKE 'memories\_%')
        AND NOT coalesce(c.reloptions @> ARRAY['toast_tuple_target=8160'], false)
$$, 'every leaf of mnemo.messages and mnemo.memories keeps rows inline up to a page');
SELECT is(mnemo_internal.leaf_storage('mnemo.messages'), 'WITH (toast_tuple_target = 8160)',
    'a table with an embedding column gets the inline storage clause');
SELECT is(mnemo_internal.leaf_storage('mnemo.memories'), 'WITH (toast_tuple_target = 8160, fillfactor = 70)',
    'memories also leave room on each page for in-place (HOT) updates of their access statistics');
SELECT is_empty($$
    SELECT t.relid::text FROM pg_partition_tree('mnemo.memories') AS t
    JOIN pg_class AS c ON c.oid = t.relid
    WHERE t.isleaf AND NOT coalesce(c.reloptions @> ARRAY['fillfactor=70'], false)
$$, 'every leaf of mnemo.memories has fillfactor 70');
SELECT is_empty($$
    SELECT t.relid::text || '.' || a.attname FROM pg_partition_tree('mnemo.context_log') AS t
    JOIN pg_attribute AS a ON a.attrelid = t.relid
    WHERE a.attname IN ('sections', 'items', 'omissions', 'provenance') AND a.attcompression <> 'l'
$$, 'context_log compresses its JSON with lz4 (one row per compile: ~5x faster than pglz)');
SELECT is(mnemo_internal.leaf_storage('mnemo.tool_calls'), '',
    'a table without one gets the defaults');

-- Segments' arrays uncompressed (migration 0011).                                  1
SELECT is_empty($$
    SELECT t.relid::text || '.' || a.attname FROM pg_partition_tree('mnemo.message_segments') AS t
    JOIN pg_attribute AS a ON a.attrelid = t.relid
    WHERE a.attnum > 0 AND NOT a.attisdropped AND a.attstorage = 'x' AND a.attname <> 'tenant_id'
$$, 'every varlena column of every message_segments partition is stored EXTERNAL (uncompressed)');

-- Keys --------------------------------------------------------------------------- 2
-- Every primary key in schema mnemo includes tenant_id (non-partition tables).
SELECT is_empty($$
    SELECT c.oid::regclass::text FROM pg_class AS c
    JOIN pg_index AS x ON x.indrelid = c.oid AND x.indisprimary
    WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
        AND NOT EXISTS (SELECT FROM pg_attribute AS a
            WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND a.attnum = ANY (x.indkey))
$$, 'every primary key in schema mnemo includes tenant_id');
-- ... and every non-partition table of mnemo has a primary key.
SELECT is_empty($$
    SELECT c.oid::regclass::text FROM pg_class AS c
    WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
        AND NOT EXISTS (SELECT FROM pg_index AS x WHERE x.indrelid = c.oid AND x.indisprimary)
$$, 'every table in schema mnemo has a primary key');

-- Indexes (name, columns, access method) --------------------------------------- 19
SELECT has_index('mnemo', 'messages', 'messages_session_turn_idx',
    ARRAY['tenant_id', 'session_id', 'turn_index']::name [], 'index messages_session_turn_idx');
SELECT has_index('mnemo', 'messages', 'messages_session_active_idx',
    ARRAY['tenant_id', 'session_id', 'turn_index']::name [], 'index messages_session_active_idx');
SELECT has_index('mnemo', 'messages', 'messages_embedding_hnsw_idx',
    ARRAY['embedding']::name [], 'index messages_embedding_hnsw_idx');
SELECT index_is_type('mnemo', 'messages', 'messages_embedding_hnsw_idx', 'hnsw',
    'messages_embedding_hnsw_idx is an HNSW index');
SELECT has_index('mnemo', 'messages', 'messages_tsv_idx', ARRAY['search_tsv']::name [],
    'index messages_tsv_idx');
SELECT has_index('mnemo', 'memories', 'memories_embedding_hnsw_idx', ARRAY['embedding']::name [],
    'index memories_embedding_hnsw_idx');
SELECT index_is_type('mnemo', 'memories', 'memories_embedding_hnsw_idx', 'hnsw',
    'memories_embedding_hnsw_idx is an HNSW index');
SELECT has_index('mnemo', 'memories', 'memories_tsv_idx', ARRAY['search_tsv']::name [],
    'index memories_tsv_idx');
SELECT index_is_type('mnemo', 'memories', 'memories_tsv_idx', 'gin', 'memories_tsv_idx is a GIN index');
SELECT has_index('mnemo', 'memories', 'memories_trgm_idx', ARRAY['content_full']::name [],
    'index memories_trgm_idx');
SELECT index_is_type('mnemo', 'memories', 'memories_trgm_idx', 'gin', 'memories_trgm_idx is a GIN index');
SELECT has_index('mnemo', 'memories', 'memories_tags_idx', ARRAY['tags']::name [], 'index memories_tags_idx');
SELECT index_is_type('mnemo', 'memories', 'memories_tags_idx', 'gin', 'memories_tags_idx is a GIN index');
SELECT has_index('mnemo', 'jobs', 'jobs_queue_idx', ARRAY['run_after']::name [], 'index jobs_queue_idx');
SELECT has_index('mnemo', 'jobs', 'jobs_dedup_idx', ARRAY['tenant_id', 'kind', 'dedup_key']::name [],
    'index jobs_dedup_idx');
SELECT index_is_unique('mnemo', 'jobs', 'jobs_dedup_idx', 'jobs_dedup_idx is unique');
SELECT has_index('mnemo', 'sessions', 'sessions_tenant_active_idx', ARRAY['tenant_id', 'updated_at']::name [],
    'index sessions_tenant_active_idx');
SELECT has_index('mnemo', 'artifacts', 'artifacts_session_idx',
    ARRAY['tenant_id', 'session_id', 'created_at']::name [], 'index artifacts_session_idx');
-- Every partitioned index reaches every partition of its table.
SELECT is_empty($$
    SELECT ci.oid::regclass::text FROM pg_class AS ci JOIN pg_index AS x ON x.indexrelid = ci.oid
    WHERE ci.relnamespace = 'mnemo'::regnamespace AND ci.relkind = 'I' AND NOT ci.relispartition
        AND (SELECT count(*) FROM pg_inherits WHERE inhparent = ci.oid)
            <> (SELECT count(*) FROM pg_inherits WHERE inhparent = x.indrelid)
$$, 'every partitioned index in mnemo is attached in every partition');

-- The project's relations and routines: those of mnemo, mnemo_internal and mnemo_archive.
CREATE TEMP VIEW tap_relations AS
SELECT c.oid, c.oid::regclass::text AS name, c.relnamespace, c.relkind, c.relispartition
FROM pg_class AS c
WHERE c.relnamespace::regnamespace::text IN ('mnemo', 'mnemo_internal', 'mnemo_archive');
CREATE TEMP VIEW tap_routines AS
SELECT p.oid, p.oid::regprocedure::text AS signature, p.pronamespace, p.proname, p.prosecdef, p.proowner,
    p.prorettype
FROM pg_proc AS p
WHERE p.pronamespace::regnamespace::text IN ('mnemo', 'mnemo_internal', 'mnemo_archive');
-- On Citus only (none on one server): the API wrappers of mnemo_internal.citus_delegate,
-- SQL calls of the routine of the same signature in mnemo_citus, inlined into the
-- caller's query (so neither SECURITY DEFINER nor SET: both would stop the inlining).
CREATE TEMP VIEW tap_citus_wrappers AS
SELECT p.oid FROM pg_proc AS p JOIN pg_proc AS r ON r.proname = p.proname AND r.proargtypes = p.proargtypes
WHERE p.pronamespace = 'mnemo'::regnamespace AND r.pronamespace::regnamespace::text = 'mnemo_citus'
    AND p.prosqlbody IS NOT NULL AND NOT p.prosecdef AND p.proconfig IS NULL;
-- The parent tables of mnemo with a tenant_id column, read from the catalog.
CREATE TEMP VIEW tap_tenant_parents AS
SELECT c.oid, c.oid::regclass::text AS name, c.relrowsecurity
FROM pg_class AS c
WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    AND EXISTS (SELECT FROM pg_attribute AS a
        WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped);

-- Row-level security ----------------------------------------------------------- 4
SELECT is_empty($$
    SELECT t.name FROM tap_tenant_parents AS t WHERE NOT t.relrowsecurity
$$, 'row-level security is enabled on every tenant table of mnemo');
SELECT is_empty($$
    SELECT t.name FROM tap_tenant_parents AS t
    WHERE NOT EXISTS (SELECT FROM pg_policy AS p
            WHERE p.polrelid = t.oid AND p.polname = 'tenant_isolation' AND p.polcmd = '*'
                AND p.polqual IS NOT NULL AND p.polwithcheck IS NOT NULL)
$$, 'every tenant table of mnemo has the tenant_isolation policy (USING and WITH CHECK)');
SELECT ok((SELECT relrowsecurity FROM pg_class WHERE oid = 'mnemo_internal.role_tenants'::regclass),
    'row-level security is enabled on mnemo_internal.role_tenants');
-- mnemo_app may touch the parent tables only, never a partition.
SELECT is_empty($$
    SELECT c.oid::regclass::text FROM pg_class AS c
    WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relispartition
        AND has_table_privilege('mnemo_app', c.oid, 'SELECT, INSERT, UPDATE, DELETE')
$$, 'mnemo_app has no privilege on any partition');

-- Public API: signatures, return types, volatility ----------------------------- 29
SELECT has_function('mnemo', 'create_tenant', ARRAY['text', 'text', 'jsonb']::name [],
    'mnemo.create_tenant(text, text, jsonb)');
SELECT function_returns('mnemo', 'create_tenant', ARRAY['text', 'text', 'jsonb']::name [], 'text');
SELECT has_function('mnemo', 'start_session', ARRAY['text', 'text', 'text', 'text', 'integer', 'integer',
    'text', 'jsonb', 'uuid', 'uuid', 'jsonb', 'timestamp with time zone']::name [], 'mnemo.start_session(...)');
SELECT function_returns('mnemo', 'start_session', ARRAY['text', 'text', 'text', 'text', 'integer', 'integer',
    'text', 'jsonb', 'uuid', 'uuid', 'jsonb', 'timestamp with time zone']::name [], 'uuid');
SELECT hasnt_function('mnemo', 'start_session', ARRAY['text', 'text', 'text', 'text', 'integer', 'integer',
    'text', 'jsonb', 'uuid', 'uuid', 'jsonb']::name [], 'the old start_session signature is gone (no ambiguity)');
SELECT has_column('mnemo', 'sessions', 'started_at', 'sessions.started_at (migration 0021)');
SELECT has_function('mnemo', 'record_message', ARRAY['text', 'uuid', 'jsonb', 'text', 'text[]',
    'timestamp with time zone', 'jsonb']::name [], 'mnemo.record_message(...)');
SELECT function_returns('mnemo', 'record_message', ARRAY['text', 'uuid', 'jsonb', 'text', 'text[]',
    'timestamp with time zone', 'jsonb']::name [], 'bigint');
SELECT volatility_is('mnemo', 'record_message', ARRAY['text', 'uuid', 'jsonb', 'text', 'text[]',
    'timestamp with time zone', 'jsonb']::name [], 'volatile', 'record_message is VOLATILE');
SELECT has_function('mnemo', 'get_artifact', ARRAY['text', 'bigint']::name [], 'mnemo.get_artifact(text, bigint)');
SELECT function_returns('mnemo', 'get_artifact', ARRAY['text', 'bigint']::name [], 'bytea');
-- API keys (issue 40): only hashes, under the tenant policy, resolved by one definer.
SELECT has_table('mnemo_internal', 'api_keys', 'table mnemo_internal.api_keys exists');
SELECT ok((SELECT c.relrowsecurity FROM pg_class AS c WHERE c.oid = 'mnemo_internal.api_keys'::regclass),
    'mnemo_internal.api_keys has row-level security');
SELECT hasnt_column('mnemo_internal', 'api_keys', 'secret', 'api_keys keeps no secret, only its hash');
SELECT has_function('mnemo', 'create_api_key', ARRAY['text', 'text', 'timestamp with time zone']::name [],
    'mnemo.create_api_key(text, text, timestamptz)');
SELECT function_returns('mnemo', 'create_api_key', ARRAY['text', 'text', 'timestamp with time zone']::name [],
    'jsonb');
SELECT has_function('mnemo', 'list_api_keys', ARRAY['text']::name [], 'mnemo.list_api_keys(text)');
SELECT has_function('mnemo', 'revoke_api_key', ARRAY['text', 'text']::name [], 'mnemo.revoke_api_key(text, text)');
SELECT function_returns('mnemo', 'revoke_api_key', ARRAY['text', 'text']::name [], 'jsonb');
SELECT function_returns('mnemo_internal', 'api_key_tenant', ARRAY['text']::name [], 'text');
SELECT is_definer('mnemo_internal', 'api_key_tenant', ARRAY['text']::name [],
    'api_key_tenant is SECURITY DEFINER (a key is found before its tenant is known)');
SELECT has_function('mnemo', 'embed', ARRAY['text']::name [], 'mnemo.embed(text)');
SELECT function_returns('mnemo', 'embed', ARRAY['text']::name [], 'vector');
SELECT volatility_is('mnemo', 'embed', ARRAY['text']::name [], 'immutable', 'embed is IMMUTABLE');
SELECT is_strict('mnemo', 'embed', ARRAY['text']::name [], 'embed is STRICT (NULL in, NULL out)');
SELECT has_function('mnemo', 'embed_batch', ARRAY['text[]']::name [], 'mnemo.embed_batch(text[])');
SELECT function_returns('mnemo', 'embed_batch', ARRAY['text[]']::name [], 'vector[]');
SELECT volatility_is('mnemo', 'embed_batch', ARRAY['text[]']::name [], 'immutable', 'embed_batch is IMMUTABLE');
SELECT has_function('mnemo', 'count_tokens', ARRAY['text']::name [], 'mnemo.count_tokens(text)');
SELECT function_returns('mnemo', 'count_tokens', ARRAY['text']::name [], 'integer');
SELECT volatility_is('mnemo', 'count_tokens', ARRAY['text']::name [], 'immutable', 'count_tokens is IMMUTABLE');
SELECT has_function('mnemo', 'set_setting', ARRAY['text', 'jsonb']::name [], 'mnemo.set_setting(text, jsonb)');
SELECT function_returns('mnemo', 'set_setting', ARRAY['text', 'jsonb']::name [], 'jsonb');
SELECT has_function('mnemo', 'bind_role', ARRAY['name', 'text']::name [], 'mnemo.bind_role(name, text)');
SELECT function_returns('mnemo', 'bind_role', ARRAY['name', 'text']::name [], 'void');
SELECT has_function('mnemo', 'run_jobs', ARRAY['integer', 'integer', 'integer', 'numeric']::name [],
    'mnemo.run_jobs(integer, integer, integer, numeric)');
SELECT is_procedure('mnemo', 'run_jobs', ARRAY['integer', 'integer', 'integer', 'numeric']::name [],
    'mnemo.run_jobs is a procedure');
SELECT has_function('mnemo', 'create_message_partitions', ARRAY['date', 'integer']::name [],
    'mnemo.create_message_partitions(date, integer)');
SELECT volatility_is('mnemo_internal', 'current_tenant_id', ARRAY[]::name [], 'stable',
    'current_tenant_id is STABLE (evaluated once per statement by the policies)');
-- A SQL function with a SET clause is never inlined and is planned at every call:
-- the functions every policy check and every compile_context run are PL/pgSQL.
SELECT function_lang_is('mnemo_internal', f, ARRAY[]::name [], 'plpgsql',
    format('%s is PL/pgSQL (its plan is kept for the session)', f))
FROM unnest(ARRAY['current_tenant_id', 'bound_tenant_id']) AS f;
SELECT function_lang_is('mnemo_internal', 'redaction_enabled', ARRAY['text']::name [], 'plpgsql',
    'redaction_enabled is PL/pgSQL (its plan is kept for the session)');

-- Internal helpers exist with their signatures ----------------------------------- 14
SELECT has_function('mnemo_internal', f, args::name [], format('mnemo_internal.%s(%s)', f, array_to_string(args, ', ')))
FROM (VALUES
    ('current_tenant_id', ARRAY[]::text []),
    ('enter_tenant', ARRAY['text']),
    ('setting', ARRAY['text']),
    ('enqueue_job', ARRAY['text', 'text', 'text', 'jsonb', 'timestamp with time zone']),
    ('embed_target_text', ARRAY['text', 'jsonb']),
    ('excerpt', ARRAY['text', 'integer', 'bigint']),
    ('fail_jobs', ARRAY['text[]', 'bigint[]', 'text']),
    ('message_tokens', ARRAY['jsonb']),
    ('process_job_batch', ARRAY['integer']),
    ('py_bootstrap', ARRAY[]::text []),
    ('run_job', ARRAY['text', 'text', 'jsonb']),
    ('store_embedding', ARRAY['text', 'jsonb', 'vector', 'vector[]']),
    ('embed_target_sentences', ARRAY['text', 'jsonb']),
    ('create_hash_partitions', ARRAY['regclass', 'integer', 'text', 'boolean'])
) AS v (f, args)
ORDER BY f;

-- Privilege matrix (sql/grants.sql): fail closed, read from the catalog ---------- 19
-- mnemo_app may execute exactly the API and the two functions its own reads' policies
-- call: nothing else in the project's schemas (no internal, admin or trigger routine).
SELECT set_eq($$
    SELECT p.pronamespace::regnamespace || '.' || p.proname FROM tap_routines AS p
    WHERE has_function_privilege('mnemo_app', p.oid, 'EXECUTE')
$$, $$
    SELECT 'mnemo.' || f FROM unnest(ARRAY['create_tenant', 'start_session', 'record_message', 'record_messages',
        'record_event',
        'remember', 'correct', 'forget', 'query_decisions', 'get_artifact', 'compile_context',
        'compile_context_bundle', 'build_acb', 'list_sessions', 'search', 'export_tenant', 'memory_stats',
        'embed', 'embed_batch', 'count_tokens', 'open_session', 'sync_messages', 'memory_query', 'memory_restore',
        'memory_release', 'handle_tool_call', 'memory_objects', 'paging_metrics', 'create_api_key',
        'list_api_keys', 'revoke_api_key']) AS f
    UNION ALL
    SELECT 'mnemo_internal.' || f FROM unnest(ARRAY['current_tenant_id', 'bound_tenant_id', 'api_key_tenant']) AS f
    UNION ALL  -- what the API wrappers call at planning (Citus only): the NULL tenant, the session's key
    SELECT 'mnemo_internal.' || f FROM unnest(ARRAY['citus_no_tenant', 'citus_api_key_set']) AS f
    WHERE EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
$$, 'mnemo_app can execute exactly the API (the policies'' two functions, the API key check)');
-- Each API routine runs as mnemo_api_owner, and only they do: no routine runs as a
-- superuser on behalf of its caller.
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_proc AS p
    WHERE p.pronamespace::regnamespace::text IN ('mnemo', 'mnemo_citus')
        AND has_function_privilege('mnemo_app', p.oid, 'EXECUTE')
        AND NOT (p.prosecdef AND p.proowner = 'mnemo_api_owner'::regrole)
        AND p.oid NOT IN (SELECT oid FROM tap_citus_wrappers)
$$, 'every API routine is SECURITY DEFINER, owned by mnemo_api_owner');
SELECT is_empty($$
    SELECT p.signature FROM tap_routines AS p
    WHERE (p.prosecdef OR p.proowner = 'mnemo_api_owner'::regrole)
        AND NOT has_function_privilege('mnemo_app', p.oid, 'EXECUTE')
        -- the one exception: memory_query's bridge to the helper LLM, whose key only
        -- the owner reads (it returns the answer, never the configuration or the key)
        AND NOT (p.oid = 'mnemo_internal.helper_answer(jsonb)'::regprocedure
            AND p.proowner <> 'mnemo_api_owner'::regrole)
$$, 'no other routine is SECURITY DEFINER or owned by mnemo_api_owner (helper_answer aside)');
-- mnemo_api_owner is held by row-level security: no superuser, no BYPASSRLS, owns no
-- table; no one logs in as it or is a member of it.
\if :tap_citus
SELECT is((SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = 'mnemo_api_owner'),
    false, 'mnemo_api_owner: no superuser, no BYPASSRLS (logs in on Citus, to reach the workers)');
\else
SELECT is((SELECT rolsuper OR rolbypassrls OR rolcanlogin FROM pg_roles WHERE rolname = 'mnemo_api_owner'),
    false, 'mnemo_api_owner: no superuser, no BYPASSRLS, no login');
\endif
SELECT is((SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = 'mnemo_app'), false,
    'mnemo_app: no superuser, no BYPASSRLS');
SELECT is_empty($$SELECT m.member::regrole::text FROM pg_auth_members AS m WHERE m.roleid = 'mnemo_api_owner'::regrole$$,
    'no role is a member of mnemo_api_owner');
SELECT is_empty($$SELECT c.oid::regclass::text FROM pg_class AS c WHERE c.relowner = 'mnemo_api_owner'::regrole$$,
    'mnemo_api_owner owns no table (the policies apply to it)');
-- Tables: mnemo_app reads the parent tables of mnemo (and its own binding) and writes
-- none; mnemo_api_owner writes the parents; neither touches a partition.
SELECT set_eq($$
    SELECT c.name FROM tap_relations AS c
    WHERE has_table_privilege('mnemo_app', c.oid, 'SELECT')
$$, $$
    SELECT c.oid::regclass::text FROM pg_class AS c
    WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    UNION ALL SELECT 'mnemo_internal.role_tenants'
$$, 'mnemo_app reads the parent tables of mnemo and mnemo_internal.role_tenants, nothing else');
SELECT is_empty($$
    SELECT c.name FROM tap_relations AS c
    WHERE has_table_privilege('mnemo_app', c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
$$, 'mnemo_app writes no table directly (the API does every write)');
SELECT is_empty($$
    SELECT c.name FROM tap_relations AS c
    WHERE CASE WHEN c.relkind = 'S' THEN has_sequence_privilege('mnemo_app', c.oid, 'USAGE, SELECT, UPDATE') END
$$, 'mnemo_app has no privilege on any sequence');
SELECT is_empty($$
    SELECT c.name FROM tap_relations AS c
    WHERE c.relkind <> 'S'
        AND has_table_privilege('mnemo_api_owner', c.oid, 'INSERT, UPDATE, DELETE')
        AND (c.relnamespace <> 'mnemo'::regnamespace OR c.relispartition)
        -- API keys: created and revoked by the API, under the tenant policy (0028)
        AND c.oid <> 'mnemo_internal.api_keys'::regclass
$$, 'mnemo_api_owner writes the parent tables of mnemo only (and the API keys; no partition)');
SELECT is_empty($$
    SELECT c.name FROM tap_relations AS c
    WHERE c.relispartition AND has_table_privilege('mnemo_api_owner', c.oid, 'SELECT')
$$, 'mnemo_api_owner reads no partition');
SELECT table_privs_are('mnemo_internal', t, 'mnemo_api_owner', ARRAY[]::text [],
    format('mnemo_api_owner cannot touch mnemo_internal.%s (the helper LLM and its key)', t))
FROM unnest(ARRAY['helper_llm', 'helper_llm_keys']) AS t ORDER BY t;
-- The admin and maintenance routines stay with the owner of the schema: neither role
-- may run them.
SELECT is_empty($$
    SELECT p.signature FROM tap_routines AS p
    WHERE (p.proname IN ('bind_role', 'set_setting', 'set_helper_llm', 'create_message_partitions',
                'lifecycle_status', 'run_jobs', 'run_sweep', 'process_job_batch', 'run_job', 'fail_jobs',
                'process_job', 'claim_job', 'claim_embed_jobs', 'store_embedding', 'extract',
                'build_message_segments', 'add_to_lexicon', 'create_hash_partitions', 'embed_target_text',
                'embed_target_sentences',
                'memories_line_tokens', 'messages_line_tokens')
            OR p.proname LIKE 'sweep\_%' OR p.proname LIKE 'job\_%' OR p.prorettype = 'trigger'::regtype)
        AND (has_function_privilege('mnemo_app', p.oid, 'EXECUTE')
            OR has_function_privilege('mnemo_api_owner', p.oid, 'EXECUTE'))
$$, 'no admin, maintenance or trigger routine is executable by mnemo_app or mnemo_api_owner');
-- PUBLIC can execute nothing in the project's schemas and read no table there.
SELECT is_empty($$
    SELECT p.signature FROM tap_routines AS p
    WHERE has_function_privilege('public', p.oid, 'EXECUTE')
$$, 'PUBLIC cannot execute any routine of mnemo, mnemo_internal or mnemo_archive');
SELECT is_empty($$
    SELECT c.name FROM tap_relations AS c
    WHERE has_table_privilege('public', c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE')
$$, 'PUBLIC has no privilege on any table of mnemo, mnemo_internal or mnemo_archive');
-- Neither role can create objects on the search path of the API routines (a function
-- or operator planted in public would run inside them).
SELECT is_empty($$
    SELECT r || ' on ' || n FROM unnest(ARRAY['mnemo_app', 'mnemo_api_owner']) AS r,
        unnest(ARRAY['public', 'mnemo', 'mnemo_internal', 'pg_catalog']) AS n
    WHERE has_schema_privilege(r, n, 'CREATE')
$$, 'neither role may CREATE in public, mnemo, mnemo_internal or pg_catalog');
SELECT table_privs_are('mnemo_internal', 'settings', 'mnemo_app', ARRAY[]::text [],
    'mnemo_app cannot read mnemo_internal.settings (nor call mnemo_internal.setting)');

-- Memory formation (0004, issue 4) ------------------------------------------------ 20
SELECT has_table('mnemo', 'extraction_state', 'table mnemo.extraction_state exists');
SELECT has_table('mnemo_internal', 'helper_llm', 'table mnemo_internal.helper_llm exists');
SELECT has_table('mnemo_internal', 'helper_llm_keys', 'table mnemo_internal.helper_llm_keys exists');
SELECT is((SELECT partstrat::text FROM pg_partitioned_table WHERE partrelid = 'mnemo.extraction_state'::regclass),
    'h', 'extraction_state is hash-partitioned');
SELECT is((SELECT relrowsecurity FROM pg_class WHERE oid = 'mnemo.extraction_state'::regclass), true,
    'extraction_state has row-level security');
SELECT table_privs_are('mnemo_internal', t, 'mnemo_app', ARRAY[]::text [],
    format('mnemo_app cannot touch mnemo_internal.%s (the helper LLM and its key)', t))
FROM unnest(ARRAY['helper_llm', 'helper_llm_keys']) AS t ORDER BY t;
SELECT has_function('mnemo', f, args::name [], format('mnemo.%s(%s)', f, array_to_string(args, ', ')))
FROM (VALUES
    ('remember', ARRAY['text', 'text', 'text', 'uuid', 'jsonb']),
    ('correct', ARRAY['text', 'bigint', 'text', 'text']),
    ('forget', ARRAY['text', 'bigint', 'jsonb']),
    ('query_decisions', ARRAY['text', 'text', 'jsonb']),
    ('set_helper_llm', ARRAY['text', 'text', 'text', 'real', 'integer', 'real', 'boolean', 'jsonb'])
) AS v (f, args) ORDER BY f;
SELECT has_function('mnemo_internal', f, args::name [], format('mnemo_internal.%s(%s)', f, array_to_string(args, ', ')))
FROM (VALUES
    ('extract', ARRAY['text', 'jsonb']),
    ('form_memory', ARRAY['text', 'text', 'jsonb']),
    ('redact', ARRAY['jsonb']),
    ('redaction_enabled', ARRAY['text']),
    ('redacted', ARRAY['text', 'jsonb']),
    ('content_hash', ARRAY['text']),
    ('memory_stub', ARRAY['text']),
    ('subtract_from_lexicon', ARRAY['text[]', 'tsvector[]']),
    ('insert_memory', ARRAY['text', 'uuid', 'text', 'text', 'text', 'jsonb', 'bigint[]', 'text', 'text[]', 'jsonb'])
) AS v (f, args) ORDER BY f;
-- A memory's stub: its text's first line, at most 160 characters (insert_memory and
-- the digests sweep's rewrite in place both read this one definition).              1
SELECT results_eq(
    $$SELECT mnemo_internal.memory_stub(E'  first line\nsecond'), length(mnemo_internal.memory_stub(repeat('x', 200)))$$,
    $$VALUES ('first line', 160)$$,
    'memory_stub: the first line of the trimmed text, cut at 160 characters');
-- Lifecycle (issue 5): the sweep driver, its batch functions, the admin view and the
-- UNLOGGED working-memory marker (their privileges: the matrix above).               11
SELECT has_function('mnemo', 'run_sweep', ARRAY['text', 'timestamp with time zone', 'text', 'integer',
    'integer', 'integer']::name [], 'mnemo.run_sweep(text, timestamptz, text, integer, integer, integer)');
SELECT is_procedure('mnemo', 'run_sweep', ARRAY['text', 'timestamp with time zone', 'text', 'integer',
    'integer', 'integer']::name [], 'mnemo.run_sweep is a procedure');
SELECT has_function('mnemo', 'lifecycle_status', ARRAY[]::name [], 'mnemo.lifecycle_status()');
SELECT has_function('mnemo_internal', f, ARRAY['timestamp with time zone', 'text', 'integer', 'jsonb']::name [],
    format('mnemo_internal.%s(timestamptz, text, integer, jsonb)', f))
FROM unnest(ARRAY['sweep_partitions', 'sweep_working_memory', 'sweep_prune', 'sweep_segments', 'sweep_access'])
    AS f ORDER BY f;
SELECT has_function('mnemo_internal', 'sweep_py', ARRAY['text', 'timestamp with time zone', 'text', 'integer',
    'jsonb']::name [], 'mnemo_internal.sweep_py(text, timestamptz, text, integer, jsonb)');
SELECT is((SELECT relpersistence::text FROM pg_class WHERE oid = 'mnemo_internal.working_memory_built'::regclass),
    'u', 'mnemo_internal.working_memory_built is UNLOGGED (emptied with working memory by a crash)');
SELECT has_table('mnemo_internal', 'lifecycle_runs', 'table mnemo_internal.lifecycle_runs exists');
SELECT has_schema('mnemo_archive');

-- Retrieval segments (issue 3, migration 0007): hash-partitioned like the tenant
-- tables, behind row-level security, embeddings stored uncompressed.                 5
SELECT is((SELECT partstrat::text FROM pg_partitioned_table
    WHERE partrelid = 'mnemo.message_segments'::regclass), 'h', 'mnemo.message_segments is hash-partitioned');
SELECT ok((SELECT relrowsecurity FROM pg_class WHERE oid = 'mnemo.message_segments'::regclass),
    'mnemo.message_segments has row-level security');
SELECT is((SELECT attstorage::text FROM pg_attribute
    WHERE attrelid = 'mnemo.message_segments'::regclass AND attname = 'embeddings'), 'e',
    'message_segments.embeddings is stored EXTERNAL (uncompressed)');
SELECT has_function('mnemo_internal', 'message_segment',
    ARRAY['text', 'bigint', 'bigint', 'integer', 'text[]', 'bigint[]', 'timestamp with time zone[]']::name [],
    'mnemo_internal.message_segment(text, bigint, bigint, integer, text[], bigint[], timestamptz[])');
SELECT has_function('mnemo_internal', 'segment_hits', ARRAY['text[]', 'integer[]', 'integer[]', 'text[]']::name [],
    'mnemo_internal.segment_hits(text[], integer[], integer[], text[])');

-- Segment vectors as int8 codes with a scale each (migration 0008).                3
SELECT col_not_null('mnemo', 'message_segments', 'embedding_scale',
    'message_segments.embedding_scale: one float4 scale per embedded message');
-- a vector of 0.1 and -0.025: scale 0.1 / 127, codes 127 and -32 (-31.75 rounded)
SELECT results_eq(
    $$SELECT encode(q.codes, 'hex'), length(q.scales)
      FROM mnemo_internal.quantize_embeddings(substring(vector_send(
          (array_fill(0.1::real, ARRAY[383]) || ARRAY[-0.025::real])::vector) FROM 5)) AS q$$,
    $$VALUES (repeat('7f', 383) || 'e0', 4)$$,
    'quantize_embeddings: int8 codes of x / (max |x| / 127), one float4 scale');
SELECT throws_ok(
    $$SELECT mnemo_internal.quantize_embeddings('\x0102'::bytea)$$, 'MN001', NULL,
    'quantize_embeddings refuses bytes that are not whole 384-float vectors (MN001)');

-- The proxy's transcripts (0020, issue 23) ----------------------------------------- 5
SELECT has_table('mnemo', 'transcripts', 'table mnemo.transcripts exists');
SELECT is((SELECT partstrat::text FROM pg_partitioned_table WHERE partrelid = 'mnemo.transcripts'::regclass),
    'h', 'transcripts is hash-partitioned');
SELECT is((SELECT relrowsecurity FROM pg_class WHERE oid = 'mnemo.transcripts'::regclass), true,
    'transcripts has row-level security');
SELECT has_function('mnemo', 'sync_messages', ARRAY['text', 'uuid', 'jsonb', 'integer', 'jsonb']::name [],
    'mnemo.sync_messages(text, uuid, jsonb, integer, jsonb)');
SELECT has_function('mnemo', 'open_session', ARRAY['text', 'text', 'text', 'text', 'text', 'integer', 'integer',
    'text', 'jsonb']::name [], 'mnemo.open_session(text, text, text, text, text, integer, integer, text, jsonb)');

-- Routine hygiene ------------------------------------------------------------------ 3
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_proc AS p
    WHERE p.pronamespace IN ('mnemo'::regnamespace, 'mnemo_internal'::regnamespace)
        AND obj_description(p.oid, 'pg_proc') IS NULL
$$, 'every routine in mnemo and mnemo_internal has a comment');
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_proc AS p
    WHERE p.pronamespace IN ('mnemo'::regnamespace, 'mnemo_internal'::regnamespace)
        AND p.oid NOT IN ('mnemo.run_jobs(integer, integer, integer, numeric)'::regprocedure,
            'mnemo.run_sweep(text, timestamptz, text, integer, integer, integer)'::regprocedure)
        AND NOT EXISTS (SELECT FROM unnest(p.proconfig) AS c WHERE c LIKE 'search\_path=%')
        AND p.oid NOT IN (SELECT oid FROM tap_citus_wrappers)  -- their bodies are parsed already
$$, 'every routine (but the procedures that commit) pins its search_path');
-- run_jobs and run_sweep COMMIT, so they must not have a SET clause at all.
SELECT is((SELECT proconfig FROM pg_proc WHERE oid = 'mnemo.run_jobs(integer, integer, integer, numeric)'::regprocedure),
    NULL, 'mnemo.run_jobs has no SET clause (it commits)');
SELECT is((SELECT proconfig FROM pg_proc
    WHERE oid = 'mnemo.run_sweep(text, timestamptz, text, integer, integer, integer)'::regprocedure),
    NULL, 'mnemo.run_sweep has no SET clause (it commits)');

-- The project's SQLSTATEs are registered. --------------------------------------- 1
SELECT set_eq($$SELECT sqlstate FROM mnemo_internal.error_codes WHERE sqlstate BETWEEN 'MN001' AND 'MN014'$$,
    $$SELECT format('MN%s', lpad(n::text, 3, '0')) FROM generate_series(1, 14) AS n$$,
    'error codes MN001..MN014 are registered');

SELECT * FROM finish();
ROLLBACK;
