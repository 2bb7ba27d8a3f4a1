-- mnemo_internal.segment_hits(p_lexemes, p_posting_offsets, p_postings, p_query) -> one row
-- Which messages of a segment (see mnemo_internal.message_segment) contain which of
-- the query's lexemes p_query: hit_terms[i] (0-based into p_query) is contained by
-- the message at 0-based position hit_rows[i]. NULLs without a hit.
-- PL/pgSQL because it detoasts each array once, on entry: the same lookups written
-- as a SQL subquery fetched the TOASTed postings again for every lexeme (~0.27 ms each).
-- Touches: nothing.
CREATE OR REPLACE FUNCTION mnemo_internal.segment_hits(
    p_lexemes text[], p_posting_offsets integer[], p_postings integer[], p_query text[]
) RETURNS TABLE (hit_terms integer[], hit_rows integer[])
LANGUAGE plpgsql
IMMUTABLE
ROWS 1
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_i integer;
    v_from integer;
    v_to integer;
BEGIN
    hit_terms := '{}';
    hit_rows := '{}';
    FOR k IN 1 .. coalesce(cardinality(p_query), 0) LOOP
        -- a binary search: p_lexemes is sorted (message_segment orders it), and
        -- width_bucket finds the last element not above the operand; array_position
        -- compared with each lexeme in turn, ~24 us a query lexeme in a segment of
        -- ~1,000 lexemes (a question that asks "when" looks up ~48 in each segment)
        v_i := width_bucket(p_query[k], p_lexemes);
        CONTINUE WHEN NOT coalesce(v_i > 0 AND p_lexemes[v_i] = p_query[k], false);
        v_from := p_posting_offsets[v_i] + 1;
        v_to := p_posting_offsets[v_i + 1];
        hit_rows := hit_rows || p_postings[v_from:v_to];
        hit_terms := hit_terms || array_fill(k - 1, ARRAY[v_to - v_from + 1]);
    END LOOP;
    IF cardinality(hit_rows) = 0 THEN
        hit_terms := NULL;
        hit_rows := NULL;
    END IF;
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.segment_hits(text[], integer[], integer[], text[]) IS
'The postings of a query''s lexemes in a retrieval segment (which message holds which lexeme).';
