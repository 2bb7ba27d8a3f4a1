-- 0019: the legacy record_access job is gone (the access sweep does its work, and
-- its own file said so): its routine is dropped and any such job still queued with it.
DROP FUNCTION IF EXISTS mnemo_internal.record_access(text, uuid);
DELETE FROM mnemo.jobs
WHERE kind = 'record_access' AND status = 'queued';
