-- mnemo_internal.message_segment(p_tenant_id, p_after_id, p_until_id, p_limit, p_lexemes,
--     p_ids, p_created) -> one row
-- What compile_context needs to score a tenant's recallable messages with ids in
-- (p_after_id, p_until_id] (NULL: no upper end), the first p_limit of them (NULL: all),
-- or, given p_ids, those messages (p_created: each one's created_at, the partition
-- key, so that each lookup reads one partition; p_after_id and p_until_id still
-- bound them), as arrays in message id order: a sealed segment's contents
-- (mnemo_internal.build_message_segments stores it, the vectors quantized) and the
-- live tail after a tenant's last segment, and the messages a large tenant's recall
-- index found (read by compile_context in the same shape, so all are scored by the
-- same code, retrieval.message_pool).
-- Recallable: not pruned, with text, spoken by a user, an assistant or a tool, not
-- secret. What depends on the reader (its channel's sensitivities and sessions, as_of,
-- the verbatim window) is filtered when scoring.
-- The per-message columns are binary, concatenated as PostgreSQL sends each value
-- (int8send, int4send, float8send, boolsend: big-endian): PL/Python turned 1,000-element
-- arrays into Python objects element by element (~3 ms a segment), a bytea is one copy.
-- Repeated text is dictionary-coded: session_ids, sensitivities, speakers and roles
-- list the distinct values, *_pos each message's (1-based, int4).
--   message_ids int8, turn_index int4, created_epoch float8 (epoch seconds),
--   token_count int4, stub_tokens int4 (the stub level's tokens, -1 without stored
--   levels), doc_length int4 (lexemes in its search_tsv: BM25's document length),
--   speakers: lower-cased names ('' without one), roles: user, assistant or tool
--   (who said it: a first-person question asks about the user's turns, migration
--   0031), embedded bool, embedding_norm
--   float8 (0 without), embeddings: the embedded messages' vectors as pgvector sends
--   them (big-endian float4, without the 4-byte header);
--   lexemes / posting_offsets / postings: each lexeme's messages (0-based positions)
--   are postings[posting_offsets[i] + 1 : posting_offsets[i + 1]]; only the lexemes in
--   p_lexemes when given (compile_context reads the tail for one query's lexemes;
--   all of them cost ~40 ms for 1,000 messages), else all (a sealed segment);
--   last_message_id: the highest id in it.
-- PL/pgSQL, not SQL: compile_context calls it for the tail at every compile, and a
-- SQL function that is not inlined is planned again at each call (~14 ms here).
-- Reads: messages.
CREATE OR REPLACE FUNCTION mnemo_internal.message_segment(
    p_tenant_id text, p_after_id bigint, p_until_id bigint DEFAULT NULL, p_limit integer DEFAULT NULL,
    p_lexemes text[] DEFAULT NULL, p_ids bigint[] DEFAULT NULL, p_created timestamptz[] DEFAULT NULL
) RETURNS TABLE (
    n_messages integer,
    message_ids bytea,
    session_ids uuid[],
    session_pos bytea,
    turn_index bytea,
    created_epoch bytea,
    token_count bytea,
    stub_tokens bytea,
    doc_length bytea,
    sensitivities text[],
    sensitivity_pos bytea,
    speakers text[],
    speaker_pos bytea,
    roles text[],
    role_pos bytea,
    embedded bytea,
    embedding_norm bytea,
    embeddings bytea,
    lexemes text[],
    posting_offsets integer[],
    postings integer[],
    last_message_id bigint
)
LANGUAGE plpgsql
STABLE
ROWS 1
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN QUERY
    WITH r AS MATERIALIZED (
        SELECT (row_number() OVER (ORDER BY m.message_id))::integer - 1 AS pos, m.message_id, m.session_id,
            m.turn_index, date_part('epoch', m.created_at) AS created_epoch, m.token_count,
            coalesce((m.levels #>> '{stub,tokens}')::integer, -1) AS stub_tokens,
            length(m.search_tsv) AS doc_length, m.search_tsv, m.sensitivity,
            coalesce(lower(m.name), '') AS speaker, m.role, m.embedding
        -- (one branch runs: the other's p_ids test is a one-time filter of the plan)
        FROM (
            SELECT m.* FROM mnemo.messages AS m
            WHERE p_ids IS NULL AND m.tenant_id = p_tenant_id AND m.message_id > p_after_id
            UNION ALL
            SELECT m.* FROM unnest(p_ids, p_created) AS k (message_id, created_at)
            JOIN mnemo.messages AS m ON m.tenant_id = p_tenant_id AND m.message_id = k.message_id
                AND m.created_at = k.created_at
            WHERE p_ids IS NOT NULL AND k.message_id > p_after_id
        ) AS m
        WHERE (p_until_id IS NULL OR m.message_id <= p_until_id)
            AND NOT m.is_pruned AND m.content IS NOT NULL AND m.role IN ('user', 'assistant', 'tool')
            AND m.sensitivity <> 'secret'
        ORDER BY m.message_id
        LIMIT p_limit
    ),
    sessions AS (
        SELECT x.session_id, (row_number() OVER (ORDER BY x.session_id))::integer AS k
        FROM (SELECT DISTINCT r.session_id FROM r) AS x
    ),
    sensitivities AS (
        SELECT x.sensitivity, (row_number() OVER (ORDER BY x.sensitivity))::integer AS k
        FROM (SELECT DISTINCT r.sensitivity FROM r) AS x
    ),
    speakers AS (
        SELECT x.speaker, (row_number() OVER (ORDER BY x.speaker))::integer AS k
        FROM (SELECT DISTINCT r.speaker FROM r) AS x
    ),
    roles AS (
        SELECT x.role, (row_number() OVER (ORDER BY x.role))::integer AS k
        FROM (SELECT DISTINCT r.role FROM r) AS x
    ),
    -- (the query's lexemes as a hashed subplan: "= ANY(p_lexemes)" compared each
    -- lexeme of each message with every query lexeme in turn, and a "@@" prefilter
    -- evaluated an OR of all of them per message: docs/performance.md)
    posting AS (
        SELECT u.lexeme, array_agg(r.pos ORDER BY r.pos) AS rows
        FROM r CROSS JOIN LATERAL unnest(tsvector_to_array(r.search_tsv)) AS u (lexeme)
        WHERE p_lexemes IS NULL OR u.lexeme IN (SELECT unnest(p_lexemes))
        GROUP BY u.lexeme
    ),
    posting_at AS (
        SELECT p.lexeme, p.rows,
            (sum(cardinality(p.rows)) OVER (ORDER BY p.lexeme) - cardinality(p.rows))::integer AS off
        FROM posting AS p
    )
    SELECT count(*)::integer,
        coalesce(string_agg(int8send(r.message_id), ''::bytea), ''::bytea),
        coalesce((SELECT array_agg(x.session_id ORDER BY x.k) FROM sessions AS x), '{}'),
        coalesce(string_agg(int4send(r.session_k), ''::bytea), ''::bytea),
        coalesce(string_agg(int4send(r.turn_index), ''::bytea), ''::bytea),
        coalesce(string_agg(float8send(r.created_epoch), ''::bytea), ''::bytea),
        coalesce(string_agg(int4send(r.token_count), ''::bytea), ''::bytea),
        coalesce(string_agg(int4send(r.stub_tokens), ''::bytea), ''::bytea),
        coalesce(string_agg(int4send(r.doc_length), ''::bytea), ''::bytea),
        coalesce((SELECT array_agg(x.sensitivity ORDER BY x.k) FROM sensitivities AS x), '{}'),
        coalesce(string_agg(int4send(r.sensitivity_k), ''::bytea), ''::bytea),
        coalesce((SELECT array_agg(x.speaker ORDER BY x.k) FROM speakers AS x), '{}'),
        coalesce(string_agg(int4send(r.speaker_k), ''::bytea), ''::bytea),
        coalesce((SELECT array_agg(x.role ORDER BY x.k) FROM roles AS x), '{}'),
        coalesce(string_agg(int4send(r.role_k), ''::bytea), ''::bytea),
        coalesce(string_agg(boolsend(r.embedding IS NOT NULL), ''::bytea), ''::bytea),
        coalesce(string_agg(float8send(coalesce(vector_norm(r.embedding), 0)), ''::bytea),
            ''::bytea),
        coalesce(string_agg(substring(vector_send(r.embedding) FROM 5), ''::bytea), ''::bytea),
        coalesce((SELECT array_agg(p.lexeme ORDER BY p.lexeme) FROM posting_at AS p), '{}'),
        (SELECT coalesce(array_agg(p.off ORDER BY p.lexeme), '{}') || coalesce(sum(cardinality(p.rows))::integer, 0)
            FROM posting_at AS p),
        coalesce((SELECT array_agg(x.pos ORDER BY p.lexeme, x.k) FROM posting_at AS p
            CROSS JOIN LATERAL unnest(p.rows) WITH ORDINALITY AS x (pos, k)), '{}'),
        max(r.message_id)
    -- in message id order: the aggregates keep their input's (one sort, not one each)
    FROM (
        SELECT r.*, s.k AS session_k, se.k AS sensitivity_k, sp.k AS speaker_k, ro.k AS role_k
        FROM r JOIN sessions AS s ON s.session_id = r.session_id
        JOIN sensitivities AS se ON se.sensitivity = r.sensitivity
        JOIN speakers AS sp ON sp.speaker = r.speaker
        JOIN roles AS ro ON ro.role = r.role
        ORDER BY r.pos
    ) AS r;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.message_segment(text, bigint, bigint, integer, text[], bigint[], timestamptz[]) IS
'A range or set of a tenant''s recallable messages as scoring arrays and lexeme postings (a segment, the tail).';
