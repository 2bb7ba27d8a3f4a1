-- 0012: line_tokens on memories and messages (issue 3, the read path's latency).
-- compile_context offers every candidate as a line of the memory block, "<label>
-- <text>", and must know each line's exact token count; counting ~90 candidates'
-- lines (and the lower levels of the memories that have them) was ~0.5 ms of every
-- compile, all of it after the query's embedding, for texts that never change
-- between compiles. A line costs its label's tokens plus its text part's
-- (tokens.count_line_text: exact, the pre-tokenizer splits after the label's "]"),
-- so the text part is counted once, when the row is written, by the triggers below
-- (mnemo_internal.memories_line_tokens / messages_line_tokens); the label is short
-- and counted at compile time.
-- memories.line_tokens: [full, detail, compact, stub], NULL for a level not stored.
-- messages.line_tokens: of content, NULL without text content.
-- Rows written before 0012 keep NULL and are counted at compile time, as before: an
-- in-place backfill would rewrite every row, and a row of these tables carries an
-- HNSW-indexed vector (one index insertion per rewritten row).
ALTER TABLE mnemo.memories ADD COLUMN line_tokens integer[];
ALTER TABLE mnemo.messages ADD COLUMN line_tokens integer;

CREATE TRIGGER memories_line_tokens
BEFORE INSERT OR UPDATE OF content_full, content_detail, content_compact, content_stub
ON mnemo.memories
FOR EACH ROW EXECUTE FUNCTION mnemo_internal.memories_line_tokens();

CREATE TRIGGER messages_line_tokens
BEFORE INSERT OR UPDATE OF content ON mnemo.messages
FOR EACH ROW EXECUTE FUNCTION mnemo_internal.messages_line_tokens();

COMMENT ON COLUMN mnemo.memories.line_tokens IS
'Tokens of content_full, content_detail, content_compact, content_stub as memory-block line text (trigger-maintained).';
COMMENT ON COLUMN mnemo.messages.line_tokens IS
'Tokens of content as memory-block line text (trigger-maintained; NULL: counted at compile time).';
