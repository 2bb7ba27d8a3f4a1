-- mnemo_internal.process_job_batch(p_batch_size) -> integer
-- Claims up to p_batch_size due jobs with FOR UPDATE SKIP LOCKED (concurrent
-- runners never take the same job; a runner that dies releases its claims with its
-- transaction) and runs them. 'embed' jobs are embedded together in one batch
-- through the model; other kinds go one by one through mnemo_internal.run_job().
-- A failure retries only the jobs it concerns (see fail_jobs). Returns the number of
-- jobs claimed (0: queue empty). The caller commits: see mnemo.run_jobs.
-- Writes: jobs, and what the jobs write (messages/memories embeddings, ...).
CREATE OR REPLACE FUNCTION mnemo_internal.process_job_batch(p_batch_size integer DEFAULT 64)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_tenants text [];
    v_ids bigint [];
    v_emb_tenants text [];
    v_emb_ids bigint [];
    v_emb_texts text [];
    v_vectors vector [];
    v_lex_tenants text [];
    v_lex_docs tsvector [];
    v_job record;
BEGIN
    SELECT array_agg(c.tenant_id), array_agg(c.job_id) INTO v_tenants, v_ids
    FROM (
        SELECT j.tenant_id, j.job_id FROM mnemo.jobs AS j
        WHERE j.status = 'queued' AND j.run_after <= now()
        ORDER BY j.run_after
        LIMIT p_batch_size
        FOR UPDATE SKIP LOCKED
    ) AS c;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;

    -- Embeddings: one model call for the whole batch.
    SELECT array_agg(e.tenant_id), array_agg(e.job_id), array_agg(e.body)
    INTO v_emb_tenants, v_emb_ids, v_emb_texts
    FROM (
        SELECT j.tenant_id, j.job_id, mnemo_internal.embed_target_text(j.tenant_id, j.payload) AS body
        FROM mnemo.jobs AS j JOIN unnest(v_tenants, v_ids) AS c (tenant_id, job_id)
            ON j.tenant_id = c.tenant_id AND j.job_id = c.job_id
        WHERE j.kind = 'embed'
    ) AS e;
    IF v_emb_ids IS NOT NULL THEN
        BEGIN
            v_vectors := mnemo.embed_batch(v_emb_texts);
            -- First embeddings also count their lexemes into the BM25 statistics.
            SELECT array_agg(s.tenant_id), array_agg(s.doc) INTO v_lex_tenants, v_lex_docs
            FROM (
                SELECT j.tenant_id, mnemo_internal.store_embedding(j.tenant_id, j.payload, v.vec) AS doc
                FROM mnemo.jobs AS j
                JOIN unnest(v_emb_tenants, v_emb_ids, v_vectors) AS v (tenant_id, job_id, vec)
                    ON j.tenant_id = v.tenant_id AND j.job_id = v.job_id
                WHERE v.vec IS NOT NULL
            ) AS s;
            PERFORM mnemo_internal.add_to_lexicon(v_lex_tenants, v_lex_docs);
            UPDATE mnemo.jobs AS j
            SET status = 'done', tries = j.tries + 1, updated_at = now(), finished_at = now()
            FROM unnest(v_emb_tenants, v_emb_ids) AS d (tenant_id, job_id)
            WHERE j.tenant_id = d.tenant_id AND j.job_id = d.job_id;
        EXCEPTION WHEN OTHERS THEN
            PERFORM mnemo_internal.fail_jobs(v_emb_tenants, v_emb_ids, SQLERRM);
        END;
    END IF;

    FOR v_job IN
        SELECT j.tenant_id, j.job_id, j.kind, j.payload
        FROM mnemo.jobs AS j JOIN unnest(v_tenants, v_ids) AS c (tenant_id, job_id)
            ON j.tenant_id = c.tenant_id AND j.job_id = c.job_id
        WHERE j.kind <> 'embed'
        ORDER BY j.job_id
    LOOP
        BEGIN
            PERFORM mnemo_internal.run_job(v_job.tenant_id, v_job.kind, v_job.payload);
            UPDATE mnemo.jobs AS j
            SET status = 'done', tries = j.tries + 1, updated_at = now(), finished_at = now()
            WHERE j.tenant_id = v_job.tenant_id AND j.job_id = v_job.job_id;
        EXCEPTION WHEN OTHERS THEN
            PERFORM mnemo_internal.fail_jobs(ARRAY[v_job.tenant_id], ARRAY[v_job.job_id], SQLERRM);
        END;
    END LOOP;
    RETURN cardinality(v_ids);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.process_job_batch(integer) IS
'Claims and runs one batch of due jobs (SKIP LOCKED); the caller commits.';
