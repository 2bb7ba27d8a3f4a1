-- 0011: a sealed segment's arrays are stored uncompressed (STORAGE EXTERNAL, as its
-- vectors already were since 0007). Every compile_context reads all of a tenant's
-- segments, and decompressing their pglz arrays (message ids, epochs, norms, lexemes,
-- postings, ...) was most of the cost of reading one: all columns of 100 bench
-- segments, read 6 times each, 18-19 ms with pglz, 7.4-8.3 ms with lz4, 4.2-4.9 ms
-- uncompressed (~0.14 ms less per segment and compile), for ~16 % more space
-- (481 kB -> 557 kB a 1,000-message segment, vectors included).
-- SET STORAGE reaches every partition; the segments already sealed keep their
-- compressed values, so they are dropped and the 'segments' sweep seals the messages
-- again (pg_cron, every minute; by hand: CALL mnemo.run_sweep('segments')), as 0008
-- did. Until then compile_context reads them live as the tail: correct, slower.
TRUNCATE mnemo.message_segments;

ALTER TABLE mnemo.message_segments
ALTER COLUMN message_ids SET STORAGE EXTERNAL,
ALTER COLUMN session_ids SET STORAGE EXTERNAL,
ALTER COLUMN session_pos SET STORAGE EXTERNAL,
ALTER COLUMN turn_index SET STORAGE EXTERNAL,
ALTER COLUMN created_epoch SET STORAGE EXTERNAL,
ALTER COLUMN token_count SET STORAGE EXTERNAL,
ALTER COLUMN stub_tokens SET STORAGE EXTERNAL,
ALTER COLUMN doc_length SET STORAGE EXTERNAL,
ALTER COLUMN sensitivities SET STORAGE EXTERNAL,
ALTER COLUMN sensitivity_pos SET STORAGE EXTERNAL,
ALTER COLUMN speakers SET STORAGE EXTERNAL,
ALTER COLUMN speaker_pos SET STORAGE EXTERNAL,
ALTER COLUMN embedded SET STORAGE EXTERNAL,
ALTER COLUMN embedding_norm SET STORAGE EXTERNAL,
ALTER COLUMN embedding_scale SET STORAGE EXTERNAL,
ALTER COLUMN lexemes SET STORAGE EXTERNAL,
ALTER COLUMN posting_offsets SET STORAGE EXTERNAL,
ALTER COLUMN postings SET STORAGE EXTERNAL;
