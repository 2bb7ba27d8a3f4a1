-- mnemo_internal.sweep_segments(p_now, p_tenant_id, p_batch_size, p_state) -> jsonb
-- One batch of the 'segments' sweep: looks at up to p_batch_size tenants (after
-- p_state's 'after', or only p_tenant_id) and seals their newer messages into
-- retrieval segments (mnemo_internal.build_message_segments) once 64 of them wait.
-- A batch ends after the first tenant it sealed messages for, so that tenant's lock
-- (which its writers wait on) is released at the batch's commit at once. Each tenant looked at brings
-- its recall index up to date (mnemo_internal.sync_recall_index: a large tenant's;
-- also looked at when only its memories changed since).
-- p_now is not used.
-- A tenant's messages and jobs are its own to write (a tenant-bound role may change
-- them directly): a tenant whose rows cannot be sealed is skipped with a warning and
-- counted (tenants_failed), so that it never stops the sweep for the others.
-- Called by mnemo.run_sweep('segments'). Writes: message_segments, recall_index.
CREATE OR REPLACE FUNCTION mnemo_internal.sweep_segments(
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
    v_tenant text;
    v_newer boolean;
    v_seen integer := 0;
    v_sealed integer := 0;
    v_failed integer := 0;
    v_last text := p_state ->> 'after';
    v_min_messages constant integer := 64;  -- the messages a segment waits for
BEGIN
    -- The tenants first, then each one's checks with its id a constant: on Citus the
    -- tenants are a reference table and their rows sit on another shard than the
    -- messages they would be joined to ("complex joins are only supported when all
    -- distributed tables are co-located"); a tenant's checks go to its worker alone.
    FOR v_tenant IN
        SELECT t.tenant_id FROM mnemo.tenants AS t
        WHERE (p_tenant_id IS NULL OR t.tenant_id = p_tenant_id)
            AND (v_last IS NULL OR t.tenant_id > v_last)
        ORDER BY t.tenant_id
        LIMIT p_batch_size
    LOOP
        v_seen := v_seen + 1;
        v_last := v_tenant;
        -- enough newer messages to seal (build_message_segments' own threshold): a
        -- tenant with fewer waiting was called every 5 s only to find too few (~0.8 ms
        -- each with its recall index's sync; on a server of 500 small tenants, 20 ms of
        -- CPU a second while nothing happened)
        v_newer := EXISTS (SELECT FROM mnemo.messages AS m
                WHERE m.tenant_id = v_tenant AND m.message_id > coalesce((SELECT max(s.last_message_id)
                    FROM mnemo.message_segments AS s WHERE s.tenant_id = v_tenant), 0)
                OFFSET v_min_messages - 1)
            -- a recall index whose memories changed since its sync (its compiles read
            -- those whole: the lifecycle sweeps touch many at a time) long enough ago
            -- that a sync now moves past them: a sync sets memories_synced_at 5
            -- minutes back (sync_recall_index's margin for open transactions), so a
            -- change in those 5 minutes stayed 'changed since' after it, and was read
            -- whole by every compile until some later change (656 memories that the
            -- promotion sweep touched, 6 -> 22 ms a compile in bench-context's sweep)
            OR EXISTS (SELECT FROM mnemo_internal.recall_tenants AS r
                JOIN mnemo.memories AS mm ON mm.tenant_id = r.tenant_id
                    AND mm.updated_at >= r.memories_synced_at AND mm.updated_at < now() - interval '5 minutes'
                WHERE r.tenant_id = v_tenant)
            -- a recall index missing one of its indexes (migration 0024 dropped one)
            OR EXISTS (SELECT FROM mnemo_internal.recall_tenants AS r
                WHERE r.tenant_id = v_tenant
                    AND (to_regclass(format('mnemo_internal.%I', r.hnsw_index)) IS NULL
                        OR to_regclass(format('mnemo_internal.%I', r.memory_hnsw_index)) IS NULL
                        OR to_regclass(format('mnemo_internal.%I', r.gin_index)) IS NULL));
        -- A tenant with nothing newer than its segments is not asked: most tenants at
        -- most runs, and the call (its own gate, plan and settings) cost ~0.5 ms a
        -- tenant, the whole run ~0.8 s a minute for 1,600 idle tenants (~0.2 s now).
        CONTINUE WHEN NOT v_newer;
        BEGIN
            v_sealed := mnemo_internal.build_message_segments(v_tenant, v_min_messages);
            PERFORM mnemo_internal.sync_recall_index(v_tenant);
        EXCEPTION WHEN OTHERS THEN
            v_failed := v_failed + 1;
            RAISE WARNING 'mnemo segments sweep: tenant % skipped: % (%)', v_tenant, SQLERRM, SQLSTATE;
        END;
        EXIT WHEN v_sealed > 0;
    END LOOP;
    RETURN jsonb_build_object('rows', v_sealed, 'done', v_seen < p_batch_size AND v_sealed = 0,
        'state', jsonb_build_object('after', v_last),
        'counts', jsonb_build_object('messages_sealed', v_sealed, 'tenants_sealed', (v_sealed > 0)::integer,
            'tenants_failed', v_failed));
END;
$$;

COMMENT ON FUNCTION mnemo_internal.sweep_segments(timestamptz, text, integer, jsonb) IS
'One batch of the segments sweep: seals tenants'' newer messages into retrieval segments.';
