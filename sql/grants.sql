-- Privileges, run on every deploy after the functions. Applications log in as members
-- of mnemo_app; row-level security limits them to the tenant they act for.
GRANT USAGE ON SCHEMA mnemo, mnemo_internal TO mnemo_app;

REVOKE ALL ON ALL ROUTINES IN SCHEMA mnemo FROM public;
REVOKE ALL ON ALL ROUTINES IN SCHEMA mnemo_internal FROM public;
GRANT EXECUTE ON ALL ROUTINES IN SCHEMA mnemo TO mnemo_app;
GRANT EXECUTE ON ALL ROUTINES IN SCHEMA mnemo_internal TO mnemo_app;

-- Admin and maintenance routines stay with the owner (and pg_cron, which runs as it).
REVOKE EXECUTE ON FUNCTION mnemo.bind_role(name, text) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo.set_setting(text, jsonb) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo.create_message_partitions(date, integer) FROM mnemo_app;
REVOKE EXECUTE ON PROCEDURE mnemo.run_jobs(integer, integer, integer, numeric) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.create_hash_partitions(regclass, integer, text, boolean)
FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.process_job_batch(integer) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.fail_jobs(text[], bigint[], text) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.run_job(text, text, jsonb) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.store_embedding(text, jsonb, vector) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.add_to_lexicon(text[], tsvector[]) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.record_access(text, uuid) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo.set_helper_llm(text, text, text, real, integer, real, boolean, jsonb)
FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.extract(text, jsonb) FROM mnemo_app;
-- Lifecycle sweeps and their admin view (issue 5).
REVOKE EXECUTE ON PROCEDURE mnemo.run_sweep(text, timestamptz, text, integer, integer, integer) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo.lifecycle_status() FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.sweep_py(text, timestamptz, text, integer, jsonb) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.sweep_partitions(timestamptz, text, integer, jsonb) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.sweep_working_memory(timestamptz, text, integer, jsonb) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.sweep_prune(timestamptz, text, integer, jsonb) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.sweep_segments(timestamptz, text, integer, jsonb) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.sweep_access(timestamptz, text, integer, jsonb) FROM mnemo_app;
REVOKE EXECUTE ON FUNCTION mnemo_internal.build_message_segments(text, integer) FROM mnemo_app;

-- Tables: the parents only, never the partitions, so no one reads around the policies.
DO $$
DECLARE
    v_table regclass;
BEGIN
    FOR v_table IN
        SELECT c.oid::regclass FROM pg_class AS c
        WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p')
            AND NOT c.relispartition
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO mnemo_app', v_table);
    END LOOP;
END
$$;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA mnemo TO mnemo_app;
GRANT SELECT ON mnemo_internal.role_tenants TO mnemo_app;
