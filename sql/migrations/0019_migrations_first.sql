-- 0019: signature changes, made until now by DO blocks in the routine files on every
-- deploy, are made once here; the deploy runs the migrations before the routine
-- files, so the new versions are created after the old ones are gone.
--   mnemo.run_sweep: its five-parameter form, from before p_max_seconds (a CALL with
--   five arguments would match both).
--   mnemo_internal.insert_memory: its nine-parameter form, from before p_options
--   (every nine-argument call would be ambiguous).
--   mnemo_internal.run_job and store_embedding returned void before (CREATE OR
--   REPLACE cannot change a return type): dropped only where they still do, since
--   dropping the current version would break the cached plans of running job runners.
DROP PROCEDURE IF EXISTS mnemo.run_sweep(text, timestamptz, text, integer, integer);
DROP FUNCTION IF EXISTS mnemo_internal.insert_memory(text, uuid, text, text, text, jsonb, bigint[], text, text[]);
DO $$
DECLARE
    v_routine regprocedure;
BEGIN
    FOR v_routine IN
        SELECT p.oid FROM pg_proc AS p
        WHERE p.oid IN (to_regprocedure('mnemo_internal.run_job(text, text, jsonb)'),
                to_regprocedure('mnemo_internal.store_embedding(text, jsonb, vector)'))
            AND p.prorettype = 'void'::regtype
    LOOP
        EXECUTE format('DROP FUNCTION %s', v_routine);
    END LOOP;
END
$$;

-- The legacy record_access job is gone (the access sweep does its work): its routine
-- is dropped, and any such job still queued with it.
DROP FUNCTION IF EXISTS mnemo_internal.record_access(text, uuid);
DELETE FROM mnemo.jobs
WHERE kind = 'record_access' AND status = 'queued';
