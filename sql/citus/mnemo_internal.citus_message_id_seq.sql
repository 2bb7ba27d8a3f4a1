-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.citus_message_id_seq() -> void
-- Creates this node's mnemo_citus.message_id_seq if it has none, where
-- mnemo_internal.message_ids draws message ids on Citus, and lets mnemo_api_owner use
-- it. A plain sequence of this node alone (DDL propagation off), not Citus's
-- mnemo.messages_message_id_seq: Citus bounds that one to the node's range (group id
-- << 48) and restarts it when it finds other bounds, and a tenant moved to a node
-- with a lower range needs ids above its old ones there (mnemo_internal.message_ids
-- moves this one past them). It starts past where Citus's sequence of this node
-- stands and steps by 1,024 from a value that is the node's group id modulo 1,024: so
-- after a move has pushed one node's sequence into another's range, the two still
-- never draw the same id (with fewer than 1,024 groups), and message ids stay unique
-- across tenants, as on one server. Run on every node by scripts/deploy.sh (after
-- mnemo_internal.citus_distribute) and on a new worker by scripts/citus.sh
-- add-worker; idempotent.
CREATE OR REPLACE FUNCTION mnemo_internal.citus_message_id_seq()
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_start bigint;
BEGIN
    PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
    IF to_regclass('mnemo_citus.message_id_seq') IS NULL THEN
        CREATE SCHEMA IF NOT EXISTS mnemo_citus;
        CREATE SEQUENCE mnemo_citus.message_id_seq AS bigint INCREMENT BY 1024;
        SELECT s.last_value - s.last_value % 1024 + l.groupid % 1024 INTO v_start
        FROM mnemo.messages_message_id_seq AS s, pg_dist_local_group AS l;
        PERFORM setval('mnemo_citus.message_id_seq', v_start + CASE WHEN v_start <= s.last_value THEN 1024 ELSE 0 END,
            false)
        FROM mnemo.messages_message_id_seq AS s;
    END IF;
    GRANT USAGE, SELECT, UPDATE ON SEQUENCE mnemo_citus.message_id_seq TO mnemo_api_owner;
    PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.citus_message_id_seq() IS
'Citus only: this node''s sequence of message ids (mnemo_citus.message_id_seq), created once.';
