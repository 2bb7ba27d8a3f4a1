-- 0006: a message's extractive levels (detail / compact / stub, with declared losses),
-- stored once by its embed job (mnemo_internal.message_levels) so that
-- compile_context degrades older turns without summarising them again at every
-- compile (measured: about 4.5 ms of a cold compile of a 200-turn session went to
-- summarising). NULL: too short to abbreviate, or not computed yet (compile_context
-- then computes them itself).
ALTER TABLE mnemo.messages ADD COLUMN levels jsonb;
COMMENT ON COLUMN mnemo.messages.levels IS
'Extractive levels {detail|compact|stub: {text, tokens, losses}}; NULL: short or not computed yet.';
