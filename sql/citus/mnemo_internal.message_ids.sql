-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.message_ids(p_tenant_id, p_n) -> bigint[]
-- Citus's version of sql/functions/mnemo_internal.message_ids.sql: draws p_n new message
-- ids for a tenant, in order, holding the tenant's sealing lock (shared) until commit,
-- on the node that holds the tenant's shards, whichever node runs the call:
--   * a call delegated to the tenant's worker (outside a transaction block) draws there;
--   * a call the coordinator runs (in a transaction block, with an API key set) runs
--     this routine on the worker, through a query routed to the tenant's shard: the
--     default nextval of mnemo.messages would be evaluated on the coordinator, whose
--     sequence is not the worker's (Citus gives each node its own range, group id << 48),
--     so one tenant's ids came from two ranges, out of write order (562949953430344,
--     then 13546): a message below the segments' or the recall index's watermark was
--     never read again, and a tool result recorded in a transaction block after its
--     call recorded outside one found no earlier call.
-- The ids come from mnemo_citus.message_id_seq, a plain sequence of each node
-- (mnemo_internal.citus_message_id_seq), not from Citus's: Citus bounds its sequence to
-- the node's range and restarts it when it finds other bounds, and a tenant whose
-- shards move to a node with a lower range must get ids above its old ones. So the
-- first draw of a backend for the tenant on a placement of its shards (a move makes a
-- new placement) compares the sequence with the tenant's highest id there and moves it
-- past that (under an exclusive lock, which the draws hold shared for their nextval
-- calls alone, so no draw sees it go back), to a value of its own residue modulo 1,024, so that no two nodes draw the
-- same id (mnemo_internal.citus_message_id_seq).
-- A table not distributed (yet): drawn here. Called by mnemo.record_messages.
CREATE OR REPLACE FUNCTION mnemo_internal.message_ids(p_tenant_id text, p_n integer)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_shard bigint;
    v_placement bigint;
    v_local boolean;
    v_ids bigint [] := '{}';
    v_rows bigint;
    v_checked text;
    v_key text;
    v_max bigint;
    v_seq record;
BEGIN
    -- in two steps: as one query (the shard id in its WHERE) it took 160 us, these 15
    v_shard := get_shard_id_for_distribution_column('mnemo.sessions', p_tenant_id);
    SELECT p.placementid, p.groupid = l.groupid INTO v_placement, v_local
    FROM pg_dist_placement AS p, pg_dist_local_group AS l
    WHERE p.shardid = v_shard;
    IF NOT v_local THEN
        -- Routed whole to the tenant's shard (one row: an aggregate), where this routine
        -- finds the placement local. The locking read beside it makes Citus run the
        -- statement on the worker in a transaction block, so the lock taken there lasts
        -- until commit (a plain read outside a client's transaction block runs in a
        -- transaction of its own there): one statement, not a locking read and then this.
        WITH lock AS (SELECT FROM mnemo.sessions AS s
            WHERE s.tenant_id = p_tenant_id AND s.session_id IS NULL FOR KEY SHARE)
        SELECT mnemo_internal.message_ids(p_tenant_id, p_n), count(*) INTO v_ids, v_rows
        FROM mnemo.sessions AS s WHERE s.tenant_id = p_tenant_id;
        RETURN v_ids;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtext('mnemo.message_segments'), hashtext(p_tenant_id));
    -- Checked per tenant and placement: the tenants of one shard move together, and
    -- each has its own highest id (a check made for a quiet tenant says nothing of a
    -- busier one). md5: a tenant id may hold any character. Bounded: past 64 kB the
    -- list starts again (a check made twice costs an index probe, nothing else).
    v_key := v_placement || ':' || md5(p_tenant_id);
    v_checked := coalesce(current_setting('mnemo.message_id_placements', true), '');
    IF length(v_checked) > 65536 THEN
        v_checked := '';
    END IF;
    IF v_placement IS NOT NULL AND strpos(v_checked || ',', ',' || v_key || ',') = 0 THEN
        IF to_regclass('mnemo_citus.message_id_seq') IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MN011',
                MESSAGE = 'this node has no mnemo_citus.message_id_seq',
                HINT = 'Run scripts/deploy.sh again (a worker added since needs it).';
        END IF;
        SELECT max(m.message_id) INTO v_max FROM mnemo.messages AS m WHERE m.tenant_id = p_tenant_id;
        SELECT s.last_value, s.is_called INTO v_seq FROM mnemo_citus.message_id_seq AS s;
        -- (the next value: last_value, or 1,024 on once drawn)
        IF v_max >= v_seq.last_value + 1024 * v_seq.is_called::integer THEN
            -- The tenant's shards came from a node that drew further: move the sequence
            -- past its ids while no draw runs on this node (draws hold the lock shared).
            -- Session locks held for these few statements only, not to commit: a
            -- client idle in a transaction that drew must not stall every writer of
            -- the node behind this (released on an error or a cancel too).
            BEGIN
                PERFORM pg_advisory_lock(hashtext('mnemo.message_id_seq'), 0);
                SELECT s.last_value, s.is_called INTO v_seq FROM mnemo_citus.message_id_seq AS s;
                IF v_max >= v_seq.last_value + 1024 * v_seq.is_called::integer THEN
                    -- the first value above v_max with this node's residue
                    PERFORM setval('mnemo_citus.message_id_seq',
                        v_max - v_max % 1024 + v_seq.last_value % 1024
                            + CASE WHEN v_max % 1024 >= v_seq.last_value % 1024 THEN 1024 ELSE 0 END, false);
                END IF;
                PERFORM pg_advisory_unlock(hashtext('mnemo.message_id_seq'), 0);
            EXCEPTION WHEN OTHERS OR query_canceled THEN
                PERFORM pg_advisory_unlock(hashtext('mnemo.message_id_seq'), 0);
                RAISE;
            END;
        END IF;
        PERFORM set_config('mnemo.message_id_placements', v_checked || ',' || v_key, false);
    END IF;
    BEGIN
        PERFORM pg_advisory_lock_shared(hashtext('mnemo.message_id_seq'), 0);
        FOR i IN 1 .. coalesce(p_n, 0) LOOP
            v_ids := array_append(v_ids, nextval('mnemo_citus.message_id_seq'));
        END LOOP;
        PERFORM pg_advisory_unlock_shared(hashtext('mnemo.message_id_seq'), 0);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock_shared(hashtext('mnemo.message_id_seq'), 0);
        RAISE;
    END;
    RETURN v_ids;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.message_ids(text, integer) IS
'Citus: draws a tenant''s new message ids in order on the node holding its shards, holding its sealing lock.';
