-- mnemo_internal.sweep_access(p_now, p_tenant_id, p_batch_size, p_state) -> jsonb
-- One batch of the 'access' sweep: folds up to p_batch_size context_log rows that
-- compile_context wrote since the last run into the access statistics of the
-- memories they sent (mnemo.memory_access: access_count + the times sent,
-- relevance_accumulator + the scores they were sent with, last_accessed_at), and
-- marks them accounted. The accumulator is R_acc of docs/design.md §Lifecycle:
-- promotion's U(m) averages it over access_count (plpy/mnemo_db/lifecycle.py).
-- A sweep over context_log's unaccounted rows (partial index), so a compile writes
-- only its log row; it polls, so the statistics lag by seconds (docs/performance.md).
-- One batch holds every tenant's rows, and a tenant-bound role may write context_log
-- rows of its own: an item the sweep cannot read must not fail the batch for all. So
-- every value is checked before it is cast, and what is malformed is skipped (counted
-- as accounted): items that are not an array, elements that are not objects, a source
-- that is not 'mem:' and a bigint, a score that is not a JSON number (it counts as 0;
-- others are clamped to [0, 1], the range of the compile's scores with the default
-- weights), a created_at outside [year 1, p_now] (p_now is used instead). The sums
-- stay within their columns (access_count saturates at the integer maximum, the
-- accumulator at the count).
-- Given a tenant (on Citus mnemo.run_sweep gives one) each table of the statement is
-- filtered by it, so that Citus sends the statement whole to that tenant's shards: over
-- several, it refuses the FOR KEY SHARE.
-- p_state is the sweep contract's; unused here.
-- Called by mnemo.run_sweep('access') (pg_cron). Writes: memory_access, context_log.
CREATE OR REPLACE FUNCTION mnemo_internal.sweep_access(
    p_now timestamptz,
    p_tenant_id text,
    p_batch_size integer,
    p_state jsonb
) RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_contexts integer;
    v_memories integer;
    v_tenants text[];
    v_ids bigint[];
    v_n bigint[];
    v_relevance float8[];
    v_last timestamptz[];
    v_alive_tenants text[];
    v_alive_ids bigint[];
BEGIN
    -- Three statements, not one: Citus ran the INSERT of a data-modifying CTE through the
    -- coordinator and failed it (22P04, "missing data for column memory_id").
    WITH picked AS (
        SELECT cl.tenant_id, cl.context_id FROM mnemo.context_log AS cl
        WHERE NOT cl.accounted AND (p_tenant_id IS NULL OR cl.tenant_id = p_tenant_id)
        LIMIT p_batch_size
    ), folded AS (
        -- NOT accounted again: a row another folder took meanwhile is skipped, not counted twice
        UPDATE mnemo.context_log AS cl SET accounted = true
        FROM picked AS p
        WHERE cl.tenant_id = p.tenant_id AND cl.context_id = p.context_id AND NOT cl.accounted
            AND (p_tenant_id IS NULL OR cl.tenant_id = p_tenant_id)
        RETURNING cl.tenant_id, cl.items,
            CASE WHEN cl.created_at >= '0001-01-01 00:00:00+00' AND cl.created_at <= p_now
                THEN cl.created_at ELSE p_now END AS sent_at
    ), sent AS (
        SELECT f.tenant_id, f.sent_at, i.item ->> 'source' AS source, i.item -> 'score' AS score
        FROM folded AS f
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE jsonb_typeof(f.items) WHEN 'array' THEN f.items ELSE '[]' END) AS i (item)
        WHERE jsonb_typeof(i.item) = 'object'
    ), uses AS (
        -- CASE, not AND: each test must run before the cast it guards
        SELECT s.tenant_id,
            CASE WHEN s.source !~ '^mem:[0-9]{1,19}$' THEN NULL
                WHEN substr(s.source, 5)::numeric > 9223372036854775807 THEN NULL
                ELSE substr(s.source, 5)::bigint END AS memory_id,
            CASE jsonb_typeof(s.score) WHEN 'number'
                THEN round(least(greatest(s.score::numeric, 0), 1), 6)::float8 ELSE 0 END AS score,
            s.sent_at
        FROM sent AS s
        WHERE s.source LIKE 'mem:%'
    ), totals AS (
        SELECT u.tenant_id, u.memory_id, count(*) AS n, sum(u.score) AS relevance, max(u.sent_at) AS last_at
        FROM uses AS u
        WHERE u.memory_id IS NOT NULL
        GROUP BY 1, 2
    )
    SELECT (SELECT count(*) FROM folded),
        array_agg(t.tenant_id ORDER BY t.tenant_id, t.memory_id), array_agg(t.memory_id ORDER BY t.tenant_id, t.memory_id),
        array_agg(t.n ORDER BY t.tenant_id, t.memory_id), array_agg(t.relevance ORDER BY t.tenant_id, t.memory_id),
        array_agg(t.last_at ORDER BY t.tenant_id, t.memory_id)
    INTO v_contexts, v_tenants, v_ids, v_n, v_relevance, v_last
    FROM totals AS t;
    -- The memories still there, locked against a delete until this batch commits: a
    -- forget() that committed after this statement began (this lock waited for it) takes
    -- its row out of this set, where a plain EXISTS, reading the statement's snapshot,
    -- still saw it and the foreign key then failed the whole batch, every tenant's rows
    -- with it. Locked in id order, as the index scan of a forget() of several memories
    -- deletes them: no deadlock between them.
    SELECT array_agg(x.tenant_id), array_agg(x.memory_id) INTO v_alive_tenants, v_alive_ids
    FROM (
        SELECT m.tenant_id, m.memory_id
        FROM mnemo.memories AS m
        JOIN unnest(v_tenants, v_ids) AS t (tenant_id, memory_id)
            ON m.tenant_id = t.tenant_id AND m.memory_id = t.memory_id
        WHERE (p_tenant_id IS NULL OR m.tenant_id = p_tenant_id)
        ORDER BY m.tenant_id, m.memory_id
        FOR KEY SHARE OF m
    ) AS x;
    -- memories deleted since they were sent are skipped (alive)
    INSERT INTO mnemo.memory_access AS a (tenant_id, memory_id, access_count, relevance_accumulator,
        last_accessed_at)
    SELECT t.tenant_id, t.memory_id, least(t.n, 2147483647), least(t.relevance, least(t.n, 2147483647)),
        t.last_at
    FROM unnest(v_tenants, v_ids, v_n, v_relevance, v_last) AS t (tenant_id, memory_id, n, relevance, last_at)
    JOIN unnest(v_alive_tenants, v_alive_ids) AS l (tenant_id, memory_id)
        ON l.tenant_id = t.tenant_id AND l.memory_id = t.memory_id
    ON CONFLICT (tenant_id, memory_id) DO UPDATE
    SET access_count = least(a.access_count::bigint + excluded.access_count, 2147483647),
        relevance_accumulator = least(a.relevance_accumulator + excluded.relevance_accumulator,
            least(a.access_count::bigint + excluded.access_count, 2147483647)),
        last_accessed_at = greatest(a.last_accessed_at, excluded.last_accessed_at);
    GET DIAGNOSTICS v_memories = ROW_COUNT;
    RETURN jsonb_build_object('rows', v_contexts, 'done', v_contexts < p_batch_size,
        'counts', jsonb_build_object('contexts', v_contexts, 'memories_updated', v_memories));
END;
$$;

COMMENT ON FUNCTION mnemo_internal.sweep_access(timestamptz, text, integer, jsonb) IS
'One batch of the access sweep: folds new context_log rows into memory access statistics and relevance.';
