-- mnemo_internal.sweep_working_memory(p_now, p_tenant_id, p_batch_size, p_state) -> jsonb
-- Working memory (tier 'working' of docs/design.md §Tiers) is the hot state of each active
-- session, kept in the UNLOGGED table mnemo.working_memory and derived only from
-- durable data: the session summary, and the session's active pinned memories, open
-- tasks and loops, plans and decisions (their compact level, else full text). An
-- UNLOGGED table is emptied by crash recovery, and so is its marker
-- mnemo_internal.working_memory_built: this sweep rebuilds, a batch of sessions at a
-- time, every active session that has no marker or whose session changed since, and
-- drops the working memory of sessions that are no longer active.
-- Called by mnemo.run_sweep('working_memory') (pg_cron, every minute).
-- Writes: working_memory, working_memory_built.
CREATE OR REPLACE FUNCTION mnemo_internal.sweep_working_memory(
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
    v_s record;
    v_items integer;
    v_total integer := 0;
    v_sessions integer := 0;
    v_dropped integer;
BEGIN
    WITH gone AS (
        DELETE FROM mnemo_internal.working_memory_built AS b
        WHERE (p_tenant_id IS NULL OR b.tenant_id = p_tenant_id)
            AND NOT EXISTS (SELECT FROM mnemo.sessions AS s
                WHERE s.tenant_id = b.tenant_id AND s.session_id = b.session_id AND s.status = 'active')
        RETURNING b.tenant_id, b.session_id
    ), d AS (
        DELETE FROM mnemo.working_memory AS w USING gone
        WHERE w.tenant_id = gone.tenant_id AND w.session_id = gone.session_id
    )
    SELECT count(*) INTO v_dropped FROM gone;

    FOR v_s IN
        SELECT s.tenant_id, s.session_id, s.summary_text, s.summary_tokens, s.updated_at
        FROM mnemo.sessions AS s
        LEFT JOIN mnemo_internal.working_memory_built AS b
            ON b.tenant_id = s.tenant_id AND b.session_id = s.session_id
        WHERE s.status = 'active' AND (p_tenant_id IS NULL OR s.tenant_id = p_tenant_id)
            AND (b.session_id IS NULL OR b.built_at < s.updated_at)
        ORDER BY s.tenant_id, s.session_id
        LIMIT p_batch_size
        FOR UPDATE OF s SKIP LOCKED
    LOOP
        DELETE FROM mnemo.working_memory AS w
        WHERE w.tenant_id = v_s.tenant_id AND w.session_id = v_s.session_id;
        INSERT INTO mnemo.working_memory (tenant_id, session_id, item_key, kind, content, token_count,
            memory_id, payload, created_at)
        SELECT v_s.tenant_id, v_s.session_id, 'session_summary', 'summary', v_s.summary_text,
            v_s.summary_tokens, NULL, '{}', p_now
        WHERE v_s.summary_text IS NOT NULL
        UNION ALL
        SELECT m.tenant_id, m.session_id, 'memory:' || m.memory_id, m.kind,
            coalesce(m.content_compact, m.content_full), coalesce(m.tokens_compact, m.tokens_full),
            m.memory_id, jsonb_build_object('pinned', m.is_pinned, 'tier', m.tier), p_now
        FROM mnemo.memories AS m
        LEFT JOIN mnemo.memory_tasks AS t ON t.tenant_id = m.tenant_id AND t.memory_id = m.memory_id
        WHERE m.tenant_id = v_s.tenant_id AND m.session_id = v_s.session_id AND m.is_active
            AND m.superseded_by IS NULL AND m.kind <> 'summary'
            AND (m.is_pinned OR m.kind IN ('open_loop', 'plan', 'decision')
                OR m.kind = 'task' AND coalesce(t.status, 'open') IN ('open', 'doing'));
        GET DIAGNOSTICS v_items = ROW_COUNT;
        INSERT INTO mnemo_internal.working_memory_built AS b (tenant_id, session_id, built_at, items)
        VALUES (v_s.tenant_id, v_s.session_id, greatest(p_now, v_s.updated_at), v_items)
        ON CONFLICT (tenant_id, session_id) DO UPDATE SET built_at = excluded.built_at, items = excluded.items;
        v_total := v_total + v_items;
        v_sessions := v_sessions + 1;
    END LOOP;
    RETURN jsonb_build_object('rows', v_total + v_dropped, 'done', v_sessions < p_batch_size,
        'state', '{}'::jsonb,
        'counts', jsonb_build_object('sessions_built', v_sessions, 'items', v_total, 'sessions_dropped', v_dropped));
END;
$$;

COMMENT ON FUNCTION mnemo_internal.sweep_working_memory(timestamptz, text, integer, jsonb) IS
'One batch of working-memory (re)builds from durable data (after a crash or a change).';
