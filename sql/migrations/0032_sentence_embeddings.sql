-- 0032: a user's turn keeps its sentences' vectors (issue 42 §3). A question in the
-- first person alone matches its 20 most relevant user turns by their closest
-- sentence (plpy/mnemo_db/compile/retrieval.py match_sentences): a fact the user
-- tells in passing is one sentence of a turn whose own vector is its request's.
-- Encoding those sentences in the compile cost ~330 ms a compile; the embed job now
-- encodes them with the turn (mnemo_internal.message_sentences splits them,
-- store_embedding stores them beside the turn's embedding) and the compile reads
-- them. NULL: not embedded yet, of one sentence, or of a role no question names.
-- Existing rows keep NULL (they match by their whole vector, as before) until
-- embedded again; a new column with no default rewrites nothing.
-- On a Citus cluster whose table is distributed already, one connection a worker for
-- the whole migration (as 0031): Citus drops a distributed function (below) only over
-- the connections its ALTER used, not beside parallel ones. Citus propagates ADD
-- COLUMN to the shards.
DO $$
DECLARE
    v_citus boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        -- (read by EXECUTE: without Citus the catalog does not exist)
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1::regclass)'
        INTO v_citus USING 'mnemo.messages';
    END IF;
    IF v_citus THEN
        SET LOCAL citus.multi_shard_modify_mode = 'sequential';
    END IF;
END;
$$;

ALTER TABLE mnemo.messages ADD COLUMN IF NOT EXISTS sentence_embeddings vector(384)[];

COMMENT ON COLUMN mnemo.messages.sentence_embeddings IS
'The vectors of a user turn''s sentences (retrieval.sentences), in order, when more than one; set by its embed job.';

-- store_embedding takes the sentences' vectors too: the old signature goes (the
-- routine file creates the new one).
DROP FUNCTION IF EXISTS mnemo_internal.store_embedding(text, jsonb, vector);
