-- mnemo_internal.run_embed_jobs(p_tenants, p_job_ids) -> void
-- Runs the given claimed 'embed' jobs together: their texts (embed_target_text) go
-- through the model in batches (several times the throughput of one call per text),
-- except a text whose vector a compile has already handed to its job (payload
-- 'vector', with 'text_md5' of the text it embeds: the proxy compiles for the user
-- message it has just recorded; used only while that is still the text), the
-- vectors are stored (store_embedding) with, for a user turn of several sentences,
-- its sentences' vectors (embed_target_sentences; encoded in the same batches, so
-- that a compile matches them without encoding: retrieval.match_sentences), the user messages embedded for the first
-- time get their topic and goal shift (paging_call 'embedded', session by session in
-- (tenant, session) order, each session's row locked first as record_messages locks
-- it, so a writer of the session and this never wait for each other's paging rows),
-- first embeddings are counted into the BM25 statistics in one statement in (tenant,
-- lexeme) order (lexicon rows are the last locks a transaction takes: see
-- mnemo.run_jobs), and the jobs are marked done. All or nothing: process_job_batch calls it on the whole batch, and
-- after a failure on each job alone, so a bad row fails only its own job. Raises
-- 57P02 when the postmaster died (stop_if_postmaster_died): no job's fault.
-- Writes: messages/memories embeddings and levels, lexicon, jobs, and paging's
-- semantic_objects, object_residency, object_links, fidelity_log, paging_state.
CREATE OR REPLACE FUNCTION mnemo_internal.run_embed_jobs(p_tenants text[], p_job_ids bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_tenants text[];
    v_ids bigint[];
    v_texts text[];
    v_known vector [];  -- a vector handed over by a compile (NULL: to encode)
    v_said jsonb;  -- per job: the sentences to encode besides its text ([] : none)
    v_sentences text[];  -- all jobs' sentences, job after job
    v_from integer[];  -- per job: its first sentence in v_sentences (NULL: none)
    v_to integer[];
    v_to_encode text[];
    v_vectors vector [];
    v_sentence_vectors vector [];
    v_lex_tenants text[];
    v_lex_docs tsvector [];
    v_first_jobs bigint [];
    v_shift record;
BEGIN
    SELECT array_agg(t.tenant_id ORDER BY t.ord), array_agg(t.job_id ORDER BY t.ord),
        array_agg(t.txt ORDER BY t.ord),
        array_agg(CASE WHEN md5(t.txt) = t.payload ->> 'text_md5' THEN (t.payload ->> 'vector')::vector END
            ORDER BY t.ord),
        jsonb_agg(coalesce(to_jsonb(t.said), '[]'::jsonb) ORDER BY t.ord)
    INTO v_tenants, v_ids, v_texts, v_known, v_said
    FROM (
        SELECT e.tenant_id, e.job_id, e.ord, j.payload, mnemo_internal.embed_target_text(j.tenant_id, j.payload) AS txt,
            mnemo_internal.embed_target_sentences(j.tenant_id, j.payload) AS said
        FROM unnest(p_tenants, p_job_ids) WITH ORDINALITY AS e (tenant_id, job_id, ord)
        JOIN mnemo.jobs AS j ON j.tenant_id = e.tenant_id AND j.job_id = e.job_id
    ) AS t;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    v_to_encode := ARRAY(
        SELECT CASE WHEN k.vec IS NULL THEN k.txt END
        FROM unnest(v_texts, v_known) WITH ORDINALITY AS k (txt, vec, ord) ORDER BY k.ord);
    -- (the sentences of a job whose text is gone are not encoded: it stores nothing)
    v_sentences := ARRAY(
        SELECT s.txt
        FROM jsonb_array_elements(v_said) WITH ORDINALITY AS t (said, ord)
        CROSS JOIN LATERAL jsonb_array_elements_text(t.said) WITH ORDINALITY AS s (txt, k)
        WHERE v_texts[t.ord] IS NOT NULL
        ORDER BY t.ord, s.k);
    SELECT array_agg(CASE WHEN c.n > 0 THEN c.upto - c.n + 1 END ORDER BY c.ord),
        array_agg(CASE WHEN c.n > 0 THEN c.upto END ORDER BY c.ord)
    INTO v_from, v_to
    FROM (
        SELECT t.ord, n.n, sum(n.n) OVER (ORDER BY t.ord) AS upto
        FROM jsonb_array_elements(v_said) WITH ORDINALITY AS t (said, ord)
        CROSS JOIN LATERAL (
            SELECT CASE WHEN v_texts[t.ord] IS NOT NULL THEN jsonb_array_length(t.said) ELSE 0 END AS n
        ) AS n
    ) AS c;
    -- the sentences go after the texts, through the same batches
    v_to_encode := v_to_encode || v_sentences;
    -- The model's work, the long part, in chunks: a dead postmaster is noticed
    -- between them (the writes below are short). A NULL text gives a NULL vector.
    FOR i IN 1 .. cardinality(v_to_encode) BY 16 LOOP
        v_vectors := v_vectors || mnemo.embed_batch(v_to_encode[i:i + 15]);
        PERFORM mnemo_internal.stop_if_postmaster_died();
    END LOOP;
    -- (v_sentences' vectors: v_vectors past the texts', offset by cardinality(v_texts))
    v_sentence_vectors := v_vectors[cardinality(v_texts) + 1:];
    v_vectors := ARRAY(
        SELECT CASE WHEN k.txt IS NOT NULL THEN coalesce(k.known, k.vec) END
        FROM unnest(v_texts, v_known, v_vectors[1:cardinality(v_texts)]) WITH ORDINALITY AS k (txt, known, vec, ord)
        ORDER BY k.ord);
    SELECT array_agg(s.tenant_id), array_agg(s.doc), array_agg(s.job_id) FILTER (WHERE s.doc IS NOT NULL)
    INTO v_lex_tenants, v_lex_docs, v_first_jobs
    FROM (
        SELECT j.tenant_id, j.job_id,
            mnemo_internal.store_embedding(j.tenant_id, j.payload, v.vec, v_sentence_vectors[v.s_from:v.s_to]) AS doc
        FROM unnest(v_tenants, v_ids, v_vectors, v_from, v_to) AS v (tenant_id, job_id, vec, s_from, s_to)
        JOIN mnemo.jobs AS j ON j.tenant_id = v.tenant_id AND j.job_id = v.job_id
        WHERE v.vec IS NOT NULL
    ) AS s;
    -- (a job id is unique across tenants: one sequence)
    FOR v_shift IN
        SELECT m.tenant_id, m.session_id, array_agg(m.message_id ORDER BY m.turn_index) AS ids
        FROM mnemo.jobs AS j
        JOIN mnemo.messages AS m ON m.tenant_id = j.tenant_id
            AND m.message_id = (j.payload ->> 'message_id')::bigint
            AND m.created_at = (j.payload ->> 'created_at')::timestamptz
        WHERE (j.tenant_id, j.job_id) IN (SELECT * FROM unnest(v_tenants, v_ids))
            AND j.job_id = ANY (v_first_jobs) AND j.payload ->> 'target' = 'message' AND m.role = 'user'
        GROUP BY m.tenant_id, m.session_id
        ORDER BY m.tenant_id, m.session_id
    LOOP
        PERFORM FROM mnemo.sessions AS s
        WHERE s.tenant_id = v_shift.tenant_id AND s.session_id = v_shift.session_id FOR NO KEY UPDATE;
        PERFORM mnemo_internal.paging_call('embedded', v_shift.tenant_id, v_shift.session_id,
            jsonb_build_object('messages', to_jsonb(v_shift.ids)));
    END LOOP;
    PERFORM mnemo_internal.add_to_lexicon(v_lex_tenants, v_lex_docs);
    UPDATE mnemo.jobs AS j
    SET status = 'done', tries = j.tries + 1, updated_at = now(), finished_at = now(),
        payload = j.payload - 'vector' - 'text_md5'
    FROM unnest(v_tenants, v_ids) AS d (tenant_id, job_id)
    WHERE j.tenant_id = d.tenant_id AND j.job_id = d.job_id;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.run_embed_jobs(text[], bigint[]) IS
'Embeds, stores and completes a set of claimed embed jobs, all or nothing.';
