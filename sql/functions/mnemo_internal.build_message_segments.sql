-- mnemo_internal.build_message_segments(p_tenant_id, p_min_messages) -> integer
-- Seals a tenant's newer messages into retrieval segments (mnemo.message_segments,
-- see migration 0007) once at least p_min_messages of them are waiting; returns how
-- many messages it sealed (0: too few, or the tenant is busy). A segment holds up to
-- 2,048 messages: a non-full last segment is rebuilt with the new ones (which also
-- drops what was pruned from it since), else a new one is added.
-- Nothing committed is ever skipped: message ids come from a sequence, so a message
-- with a lower id may commit after one with a higher id. record_message holds a
-- shared per-tenant advisory lock from before it draws its id until it commits
-- (mnemo_internal.message_ids); this takes the lock exclusively
-- (mnemo_internal.lock_message_ids: waiting for those writers, 2 s at most, then
-- returning 0) before it reads, so every id up to what it reads is committed. (On
-- Citus both are taken on the node that holds the tenant's shards.)
-- Messages whose embed job is still queued, and all after them, wait for the next
-- run (their vectors belong in the segment); one whose job failed is sealed without.
-- Vectors are stored as int8 codes with a scale each (quantize_embeddings).
-- Writes: message_segments.
CREATE OR REPLACE FUNCTION mnemo_internal.build_message_segments(
    p_tenant_id text, p_min_messages integer DEFAULT 64
) RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
DECLARE
    v_max constant integer := 2048;
    v_last record;
    v_hwm bigint;
    v_until bigint;
    v_after bigint;
    v_no integer;
    v_seg record;
    v_vectors record;
    v_new integer;
    v_sealed integer := 0;
BEGIN
    IF p_tenant_id IS NULL OR p_min_messages IS NULL OR p_min_messages < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = 'build_message_segments needs a tenant and a positive minimum';
    END IF;
    SELECT s.segment_no, s.after_message_id, s.last_message_id, s.n_messages INTO v_last
    FROM mnemo.message_segments AS s WHERE s.tenant_id = p_tenant_id
    ORDER BY s.segment_no DESC LIMIT 1;
    v_hwm := coalesce(v_last.last_message_id, 0);
    -- A cheap gate before the lock: are there enough newer messages at all?
    IF (SELECT count(*) FROM (SELECT FROM mnemo.messages AS m
            WHERE m.tenant_id = p_tenant_id AND m.message_id > v_hwm LIMIT p_min_messages) AS x)
        < p_min_messages THEN
        RETURN 0;
    END IF;
    IF NOT mnemo_internal.lock_message_ids(p_tenant_id) THEN
        RETURN 0;  -- a writer holds the tenant's lock: the next run seals
    END IF;
    -- (a payload that is not a message id is not one of the job runner's: ignored)
    SELECT min((j.payload ->> 'message_id')::bigint) - 1 INTO v_until
    FROM mnemo.jobs AS j
    WHERE j.tenant_id = p_tenant_id AND j.kind = 'embed' AND j.status = 'queued'
        AND j.payload ->> 'target' = 'message' AND j.payload ->> 'message_id' ~ '^[0-9]{1,18}$';
    LOOP
        SELECT s.segment_no, s.after_message_id, s.last_message_id, s.n_messages INTO v_last
        FROM mnemo.message_segments AS s WHERE s.tenant_id = p_tenant_id
        ORDER BY s.segment_no DESC LIMIT 1;
        v_hwm := coalesce(v_last.last_message_id, 0);
        EXIT WHEN v_until IS NOT NULL AND v_until <= v_hwm;
        IF v_last.segment_no IS NOT NULL AND v_last.n_messages < v_max THEN
            v_no := v_last.segment_no;
            v_after := v_last.after_message_id;
        ELSE
            v_no := coalesce(v_last.segment_no + 1, 0);
            v_after := v_hwm;
        END IF;
        SELECT * INTO v_seg FROM mnemo_internal.message_segment(p_tenant_id, v_after, v_until, v_max);
        -- new ones: all of a new segment; a rebuilt one's growth (less if some of its
        -- messages were pruned since: then it waits for a few more)
        v_new := v_seg.n_messages - CASE WHEN v_no = v_last.segment_no THEN v_last.n_messages ELSE 0 END;
        EXIT WHEN v_new < p_min_messages;
        SELECT * INTO v_vectors FROM mnemo_internal.quantize_embeddings(v_seg.embeddings);
        -- built_at = excluded.built_at (its default, now()): Citus takes only IMMUTABLE
        -- functions in ON CONFLICT DO UPDATE SET
        INSERT INTO mnemo.message_segments AS s (
            tenant_id, segment_no, after_message_id, last_message_id, n_messages, message_ids,
            session_ids, session_pos, turn_index, created_epoch, token_count, stub_tokens, doc_length,
            sensitivities, sensitivity_pos, speakers, speaker_pos, roles, role_pos, embedded, embedding_norm,
            embeddings, embedding_scale, lexemes, posting_offsets, postings)
        VALUES (
            p_tenant_id, v_no, v_after, v_seg.last_message_id, v_seg.n_messages, v_seg.message_ids,
            v_seg.session_ids, v_seg.session_pos, v_seg.turn_index, v_seg.created_epoch, v_seg.token_count,
            v_seg.stub_tokens, v_seg.doc_length, v_seg.sensitivities, v_seg.sensitivity_pos, v_seg.speakers,
            v_seg.speaker_pos, v_seg.roles, v_seg.role_pos, v_seg.embedded, v_seg.embedding_norm, v_vectors.codes,
            v_vectors.scales,
            v_seg.lexemes, v_seg.posting_offsets, v_seg.postings)
        ON CONFLICT (tenant_id, segment_no) DO UPDATE SET
            after_message_id = excluded.after_message_id, last_message_id = excluded.last_message_id,
            built_at = excluded.built_at, n_messages = excluded.n_messages,
            message_ids = excluded.message_ids,
            session_ids = excluded.session_ids, session_pos = excluded.session_pos,
            turn_index = excluded.turn_index, created_epoch = excluded.created_epoch,
            token_count = excluded.token_count, stub_tokens = excluded.stub_tokens,
            doc_length = excluded.doc_length, sensitivities = excluded.sensitivities,
            sensitivity_pos = excluded.sensitivity_pos, speakers = excluded.speakers,
            speaker_pos = excluded.speaker_pos, roles = excluded.roles, role_pos = excluded.role_pos,
            embedded = excluded.embedded,
            embedding_norm = excluded.embedding_norm, embeddings = excluded.embeddings,
            embedding_scale = excluded.embedding_scale,
            lexemes = excluded.lexemes, posting_offsets = excluded.posting_offsets,
            postings = excluded.postings;
        v_sealed := v_sealed + v_new;
    END LOOP;
    RETURN v_sealed;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.build_message_segments(text, integer) IS
'Seals a tenant''s newer messages into retrieval segments (mnemo.message_segments); returns messages sealed.';
