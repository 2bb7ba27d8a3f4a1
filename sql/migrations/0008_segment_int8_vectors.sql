-- 0008: a sealed segment's vectors as int8 codes with one scale per vector
-- (mnemo_internal.quantize_embeddings): 384 bytes a message instead of 1,536. Every
-- compile reads all of a tenant's segment vectors; as float4 they were ~1.5 GB for
-- 1M messages, the largest thing compile_context read, and what fell out of shared
-- buffers first (a miss cost ~9 ms of reads, most of the latency tail).
-- Segments are an acceleration structure, never the truth: the old ones are dropped
-- and the 'segments' sweep seals the messages again (pg_cron, every minute; by hand:
-- CALL mnemo.run_sweep('segments')). Until then compile_context reads them live as
-- the tail: correct, slower.
TRUNCATE mnemo.message_segments;

ALTER TABLE mnemo.message_segments ADD COLUMN embedding_scale bytea NOT NULL;

COMMENT ON COLUMN mnemo.message_segments.embeddings IS
'The embedded messages'' vectors as int8 codes, 384 bytes each (vector = scale x codes).';
COMMENT ON COLUMN mnemo.message_segments.embedding_scale IS
'One big-endian float4 scale per embedded message (mnemo_internal.quantize_embeddings).';
