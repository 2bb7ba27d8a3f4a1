-- 0031: a sealed segment keeps each message's role (issue 42 §3). A question in the
-- first person ("How many doctors did I see?") is asked by the user about what the
-- user said: compile_context's retrieval counts the user's turns as the speaker the
-- question names (retrieval.asker_roles), as it does a speaker named in it, and the
-- other roles' turns only by what they borrow from the turns beside them
-- (retrieval.fuse_candidates); a segment kept a message's name, not its role. roles: the distinct roles of the
-- segment's messages, role_pos: each message's (1-based, big-endian int4), as
-- speakers and speaker_pos are (mnemo_internal.message_segment).
-- Segments are an acceleration structure, never the truth: the old ones are dropped
-- and the 'segments' sweep seals the messages again (pg_cron, every minute; by hand:
-- CALL mnemo.run_sweep('segments')), as 0008 and 0011 did. Until then
-- compile_context reads them live as the tail: correct, slower.
-- On a Citus cluster whose table is distributed already, one connection a worker for
-- the whole migration: Citus drops a distributed function (below) only over the
-- connections its TRUNCATE and ALTER used, not beside parallel ones.
-- (The catalog is read by EXECUTE: without Citus it does not exist, and a static
-- query naming it fails when the block is planned.)
DO $$
DECLARE
    v_citus boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1::regclass)'
        INTO v_citus USING 'mnemo.message_segments';
    END IF;
    IF v_citus THEN
        SET LOCAL citus.multi_shard_modify_mode = 'sequential';
    END IF;
    PERFORM set_config('mnemo.migration_on_citus', v_citus::text, true);  -- for the block below
END;
$$;

TRUNCATE mnemo.message_segments;

ALTER TABLE mnemo.message_segments
ADD COLUMN roles text[] NOT NULL,
ADD COLUMN role_pos bytea NOT NULL;

-- uncompressed, as every other array of a segment (0011). Citus propagates no SET
-- STORAGE, and altering its shards from here would wait on the TRUNCATE above: on a
-- cluster whose table is distributed already only the coordinator's table is altered,
-- and the shards keep the default (a value is compressed only past ~2 kB: roles holds
-- a few names, role_pos 4 bytes a message).
DO $$
DECLARE
    v_citus constant boolean := current_setting('mnemo.migration_on_citus')::boolean;
BEGIN
    IF v_citus THEN
        SET LOCAL citus.enable_ddl_propagation = off;
    END IF;
    ALTER TABLE mnemo.message_segments
    ALTER COLUMN roles SET STORAGE EXTERNAL,
    ALTER COLUMN role_pos SET STORAGE EXTERNAL;
    IF v_citus THEN  -- the DROP FUNCTION below must reach the workers
        SET LOCAL citus.enable_ddl_propagation = on;
    END IF;
END;
$$;

COMMENT ON COLUMN mnemo.message_segments.roles IS
'The distinct roles (user, assistant, tool) of the segment''s messages.';
COMMENT ON COLUMN mnemo.message_segments.role_pos IS
'Each message''s role: a big-endian int4, 1-based into roles.';

-- message_segment returns the roles too: a function's result type cannot be
-- replaced, so the old one goes (the routine file creates the new one).
DROP FUNCTION IF EXISTS mnemo_internal.message_segment(text, bigint, bigint, integer, text[], bigint[], timestamptz[]);
