-- 0025: a tenant gets its recall index from 25,000 sealed messages (was 5,000).
-- Measured with bench-context's size sweep after 0024 (docs/performance.md): at 10k
-- messages the indexed compile took 82.8 ms p95 against 48.8 ms for scoring the whole
-- history, at 100k 260 ms against 470 ms; the two cross near 23k. A database still on
-- the old default moves; a value an operator chose stays.
UPDATE mnemo_internal.settings AS s
SET value = '25000'::jsonb
WHERE s.key = 'recall_index_min_messages' AND s.value = '5000'::jsonb;
