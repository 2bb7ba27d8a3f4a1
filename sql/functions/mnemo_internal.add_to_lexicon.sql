-- mnemo_internal.add_to_lexicon(p_tenant_ids, p_documents) -> void
-- Counts newly indexed documents (tsvectors of messages or memories, one per tenant
-- entry) into mnemo.lexicon: one more document for each distinct lexeme, and the
-- tenant's document count and total length on the row with lexeme ''. One statement
-- in (tenant, lexeme) order, so concurrent job runners lock rows in the same order
-- and never deadlock. Writes: lexicon.
-- PL/pgSQL, not SQL: Citus plans no query on a distributed table from a SQL function's parameters
CREATE OR REPLACE FUNCTION mnemo_internal.add_to_lexicon(p_tenant_ids text[], p_documents tsvector[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    INSERT INTO mnemo.lexicon AS l (tenant_id, lexeme, doc_count, total_length)
    SELECT d.tenant_id, x.lexeme, count(*), sum(x.len)
    FROM unnest(p_tenant_ids, p_documents) AS d (tenant_id, doc)
    CROSS JOIN LATERAL (
        SELECT '' AS lexeme, length(d.doc)::bigint AS len
        UNION ALL
        SELECT u.lexeme, 0 FROM unnest(tsvector_to_array(d.doc)) AS u (lexeme)
    ) AS x
    WHERE d.doc IS NOT NULL
    GROUP BY d.tenant_id, x.lexeme
    ORDER BY d.tenant_id, x.lexeme
    ON CONFLICT (tenant_id, lexeme) DO UPDATE
    SET doc_count = l.doc_count + excluded.doc_count,
        total_length = l.total_length + excluded.total_length;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.add_to_lexicon(text[], tsvector[]) IS
'Adds newly indexed documents to the per-tenant BM25 statistics (mnemo.lexicon).';
