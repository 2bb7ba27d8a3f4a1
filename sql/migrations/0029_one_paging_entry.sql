-- 0029: record_message reaches the paging package through mnemo_internal.paging_call
-- ('message'), the one entry that the phantom tools use too; its own entry goes.
DROP FUNCTION IF EXISTS mnemo_internal.page_message(text, uuid, jsonb, jsonb);
