-- 0023: paging protects a larger working set and relieves pressure less deeply
-- (protect_newest 2 -> 12, target 0.4 -> 0.6: docs/replay.md). A database still on
-- the old defaults moves to the new ones; a value an operator chose stays.
UPDATE mnemo_internal.settings AS s
SET value = s.value || '{"protect_newest": 12, "target": 0.6}'::jsonb
WHERE s.key = 'paging' AND s.value -> 'protect_newest' = '2'::jsonb AND s.value -> 'target' = '0.4'::jsonb;
