-- mnemo.forget(p_tenant_id, p_memory_id, p_filter) -> integer
-- Right to erasure: really deletes one memory (p_memory_id) or every memory of the
-- tenant matching p_filter, with everything derived from it — typed payloads
-- (facts, decisions, tasks), versions, entity mentions and edges, links in both
-- directions, working-memory rows, admission/fault/fidelity log rows, queued embed
-- jobs, its embedding (on the row) and the BM25 statistics it contributed
-- (mnemo.lexicon). Entities no longer mentioned or linked are deleted too; memories
-- it had superseded keep their valid_to but lose the dangling superseded_by.
--   p_filter keys (ANDed): memory_ids [], kind, session_id, tags [] (any of),
--   contains (case-insensitive substring), source_key, entity (name or alias),
--   source_message_ids [] (any of), created_before, created_after; {"all": true}
--   erases every memory of the tenant. An empty filter without p_memory_id is MN001.
-- The source messages stay (erasing history is a separate decision). Returns the
-- number of memories deleted. Writes: the tables above.
CREATE OR REPLACE FUNCTION mnemo.forget(
    p_tenant_id text,
    p_memory_id bigint DEFAULT NULL,
    p_filter jsonb DEFAULT '{}'
) RETURNS integer
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_ids bigint [];
    v_entities bigint [];
    v_key text;
    f jsonb := coalesce(p_filter, '{}');
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    IF jsonb_typeof(f) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'filter must be a JSON object';
    END IF;
    PERFORM mnemo_internal.check_json_depth(f, 'filter');
    PERFORM mnemo_internal.checked_timestamp(f ->> k, 'filter.' || k)
    FROM unnest(ARRAY['created_before', 'created_after']) AS k;
    SELECT k INTO v_key FROM jsonb_object_keys(f) AS k
    WHERE k NOT IN ('memory_ids', 'kind', 'session_id', 'tags', 'contains', 'source_key', 'entity',
        'source_message_ids', 'created_before', 'created_after', 'all') LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown filter key %L', v_key),
            HINT = 'Keys: memory_ids, kind, session_id, tags, contains, source_key, entity, '
                'source_message_ids, created_before, created_after, all';
    END IF;
    IF p_memory_id IS NULL AND (f = '{}' OR (f ? 'all' AND f ->> 'all' <> 'true' AND
        (SELECT count(*) FROM jsonb_object_keys(f)) = 1)) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'forget needs a memory id or a filter',
            HINT = 'To erase every memory of the tenant pass {"all": true}.';
    END IF;
    SELECT k INTO v_key FROM unnest(ARRAY['memory_ids', 'tags', 'source_message_ids']) AS k
    WHERE f ? k AND jsonb_typeof(f -> k) <> 'array' LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('filter.%s must be an array', v_key);
    END IF;

    SELECT coalesce(array_agg(m.memory_id), '{}') INTO v_ids
    FROM mnemo.memories AS m
    WHERE m.tenant_id = p_tenant_id
        AND (p_memory_id IS NULL OR m.memory_id = p_memory_id)
        AND (NOT f ? 'memory_ids' OR m.memory_id = ANY(ARRAY(
            SELECT jsonb_array_elements_text(f -> 'memory_ids')::bigint)))
        AND (NOT f ? 'kind' OR m.kind = f ->> 'kind')
        AND (NOT f ? 'session_id' OR m.session_id = (f ->> 'session_id')::uuid)
        AND (NOT f ? 'tags' OR m.tags && ARRAY(SELECT jsonb_array_elements_text(f -> 'tags')))
        AND (NOT f ? 'contains' OR strpos(lower(m.content_full), lower(f ->> 'contains')) > 0)
        AND (NOT f ? 'source_key' OR m.source_key = f ->> 'source_key')
        AND (NOT f ? 'source_message_ids' OR m.source_message_ids && ARRAY(
            SELECT jsonb_array_elements_text(f -> 'source_message_ids')::bigint))
        AND (NOT f ? 'created_before' OR m.created_at < (f ->> 'created_before')::timestamptz)
        AND (NOT f ? 'created_after' OR m.created_at > (f ->> 'created_after')::timestamptz)
        AND (NOT f ? 'entity' OR EXISTS (
            SELECT FROM mnemo.entity_mentions AS em
            JOIN mnemo.entity_aliases AS a ON a.tenant_id = em.tenant_id AND a.entity_id = em.entity_id
            WHERE em.tenant_id = p_tenant_id AND em.memory_id = m.memory_id
                AND a.alias_normalized = lower(btrim(f ->> 'entity'))));
    IF p_memory_id IS NOT NULL AND cardinality(v_ids) = 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN010',
            MESSAGE = format('no memory %s for tenant %L matches', p_memory_id, p_tenant_id);
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN 0;
    END IF;

    -- BM25 statistics: only rows that were counted (they have an embedding).
    PERFORM mnemo_internal.subtract_from_lexicon(array_agg(m.tenant_id), array_agg(m.search_tsv))
    FROM mnemo.memories AS m
    WHERE m.tenant_id = p_tenant_id AND m.memory_id = ANY(v_ids) AND m.embedding IS NOT NULL;

    SELECT coalesce(array_agg(DISTINCT em.entity_id), '{}') INTO v_entities FROM mnemo.entity_mentions AS em
    WHERE em.tenant_id = p_tenant_id AND em.memory_id = ANY(v_ids);
    DELETE FROM mnemo.memory_facts AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.memory_decisions AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.memory_tasks AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.memory_versions AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.entity_mentions AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.entity_edges AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.memory_links AS x WHERE x.tenant_id = p_tenant_id
        AND (x.src_memory_id = ANY(v_ids) OR x.dst_memory_id = ANY(v_ids));
    DELETE FROM mnemo.working_memory AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.admission_log AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.fault_log AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.fidelity_log AS x WHERE x.tenant_id = p_tenant_id AND x.memory_id = ANY(v_ids);
    DELETE FROM mnemo.jobs AS x WHERE x.tenant_id = p_tenant_id AND x.kind = 'embed'
        AND x.dedup_key = ANY(ARRAY(SELECT 'memory:' || i FROM unnest(v_ids) AS i));
    UPDATE mnemo.memories AS m SET superseded_by = NULL, updated_at = now()
    WHERE m.tenant_id = p_tenant_id AND m.superseded_by = ANY(v_ids) AND m.memory_id <> ALL(v_ids);
    DELETE FROM mnemo.memories AS m WHERE m.tenant_id = p_tenant_id AND m.memory_id = ANY(v_ids);

    -- Entities nothing refers to any more (their names may be personal data).
    DELETE FROM mnemo.entity_aliases AS a WHERE a.tenant_id = p_tenant_id AND a.entity_id = ANY(v_entities)
        AND NOT EXISTS (SELECT FROM mnemo.entity_mentions AS em
            WHERE em.tenant_id = p_tenant_id AND em.entity_id = a.entity_id)
        AND NOT EXISTS (SELECT FROM mnemo.entity_edges AS e WHERE e.tenant_id = p_tenant_id
            AND a.entity_id IN (e.src_entity_id, e.dst_entity_id));
    DELETE FROM mnemo.entities AS e WHERE e.tenant_id = p_tenant_id AND e.entity_id = ANY(v_entities)
        AND NOT EXISTS (SELECT FROM mnemo.entity_mentions AS em
            WHERE em.tenant_id = p_tenant_id AND em.entity_id = e.entity_id)
        AND NOT EXISTS (SELECT FROM mnemo.entity_edges AS x WHERE x.tenant_id = p_tenant_id
            AND e.entity_id IN (x.src_entity_id, x.dst_entity_id));
    RETURN cardinality(v_ids);
EXCEPTION
    WHEN invalid_text_representation OR invalid_datetime_format OR datetime_field_overflow
        OR numeric_value_out_of_range THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'malformed filter value: ' || SQLERRM;
END;
$$;

COMMENT ON FUNCTION mnemo.forget(text, bigint, jsonb) IS
'Erases memories (one, or all matching a filter) with everything derived from them.';
