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
TRUNCATE mnemo.message_segments;

ALTER TABLE mnemo.message_segments
ADD COLUMN roles text[] NOT NULL,
ADD COLUMN role_pos bytea NOT NULL;

-- uncompressed, as every other array of a segment (0011)
ALTER TABLE mnemo.message_segments
ALTER COLUMN roles SET STORAGE EXTERNAL,
ALTER COLUMN role_pos SET STORAGE EXTERNAL;

COMMENT ON COLUMN mnemo.message_segments.roles IS
'The distinct roles (user, assistant, tool) of the segment''s messages.';
COMMENT ON COLUMN mnemo.message_segments.role_pos IS
'Each message''s role: a big-endian int4, 1-based into roles.';

-- message_segment returns the roles too: a function's result type cannot be
-- replaced, so the old one goes (the routine file creates the new one).
DROP FUNCTION IF EXISTS mnemo_internal.message_segment(text, bigint, bigint, integer, text[], bigint[], timestamptz[]);
