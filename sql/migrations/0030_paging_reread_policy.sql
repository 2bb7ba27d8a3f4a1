-- 0030: paging predicts which tool results are not read again (issue 44). An object
-- of a command that reads and writes no source keeps its class (test, listing,
-- search, command: paging/sources.command_class; a fetch: fetch), so that the output
-- of a plain command or a fetched page leaves soon while test runs, listings and searches, which agents run
-- again, stay (ladder.aging's quiet rule). Results that a write outdated or a later
-- read superseded cannot be read again: they go to stub once a newer call stands
-- between them and now (outdated_after_calls 3 -> 1, outdated_to compact -> stub;
-- docs/replay.md). A database still on the old defaults moves to the new ones; a
-- value an operator chose stays.
ALTER TABLE mnemo.semantic_objects ADD COLUMN IF NOT EXISTS result_class text
CHECK (result_class IN ('test', 'listing', 'search', 'command', 'fetch'));

UPDATE mnemo_internal.settings AS s
SET value = s.value || '{"outdated_after_calls": 1, "outdated_to": "stub"}'::jsonb
WHERE
    s.key = 'paging' AND s.value -> 'outdated_after_calls' = '3'::jsonb
    AND s.value -> 'outdated_to' = '"compact"'::jsonb;
