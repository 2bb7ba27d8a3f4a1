-- mnemo_internal.subtract_from_lexicon(p_tenant_ids, p_documents) -> void
-- The inverse of add_to_lexicon, for erasure (mnemo.forget): removes documents that
-- were counted into mnemo.lexicon — one document less for each of their distinct
-- lexemes, and their count and length from the totals row (lexeme ''). Lexemes left
-- in no document are deleted, so nothing of an erased text survives in the
-- statistics. One statement in (tenant, lexeme) order, like add_to_lexicon.
-- Writes: lexicon. With the documents of one tenant (as mnemo.forget passes) the
-- UPDATE also names that tenant: Citus then sends it whole to the tenant's shard; over
-- every shard, from a call delegated to a worker, it failed the call ("there is already
-- a transaction in progress" on the other worker).
-- PL/pgSQL, not SQL: Citus plans no query on a distributed table from a SQL function's parameters
CREATE OR REPLACE FUNCTION mnemo_internal.subtract_from_lexicon(p_tenant_ids text[], p_documents tsvector[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_one text;  -- the tenant, when the documents are one tenant's
BEGIN
    IF (SELECT count(DISTINCT t) FROM unnest(p_tenant_ids) AS t) = 1 THEN
        v_one := p_tenant_ids[1];
    END IF;
    WITH d AS (
        SELECT x.tenant_id, x.lexeme, count(*) AS docs, sum(x.len) AS len
        FROM unnest(p_tenant_ids, p_documents) AS u (tenant_id, doc)
        CROSS JOIN LATERAL (
            SELECT u.tenant_id, '' AS lexeme, length(u.doc)::bigint AS len
            UNION ALL
            SELECT u.tenant_id, t.lexeme, 0 FROM unnest(tsvector_to_array(u.doc)) AS t (lexeme)
        ) AS x
        WHERE u.doc IS NOT NULL
        GROUP BY x.tenant_id, x.lexeme
        ORDER BY x.tenant_id, x.lexeme
    )
    UPDATE mnemo.lexicon AS l
    SET doc_count = greatest(l.doc_count - d.docs, 0), total_length = greatest(l.total_length - d.len, 0)
    FROM d WHERE l.tenant_id = d.tenant_id AND l.lexeme = d.lexeme AND (v_one IS NULL OR l.tenant_id = v_one);
    DELETE FROM mnemo.lexicon AS l
    WHERE l.tenant_id = ANY(p_tenant_ids) AND l.lexeme <> '' AND l.doc_count = 0;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.subtract_from_lexicon(text[], tsvector[]) IS
'Removes erased documents from the per-tenant BM25 statistics (mnemo.lexicon).';
