-- mnemo_internal.message_months(p_cutoff, p_after, p_limit) -> setof (name, parent, range_from)
-- The month partitions of mnemo.messages that ended by p_cutoff, after p_after in name
-- order, at most p_limit of them, each with the table it is attached to: on one server
-- the months under each hash partition (messages_hN_YYYYMM). sweep_partitions detaches
-- them; sql/citus/ has the Citus layout's version (one month level).
CREATE OR REPLACE FUNCTION mnemo_internal.message_months(p_cutoff date, p_after text, p_limit integer)
RETURNS TABLE (name name, parent name, range_from date)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT c.relname, h.relname, p.range_from
    FROM pg_inherits AS hi
    JOIN pg_class AS h ON h.oid = hi.inhrelid
    JOIN pg_inherits AS mi ON mi.inhparent = hi.inhrelid
    JOIN pg_class AS c ON c.oid = mi.inhrelid
    CROSS JOIN LATERAL (SELECT to_date(substring(c.relname FROM '_([0-9]{6})$'), 'YYYYMM') AS range_from) AS p
    WHERE hi.inhparent = 'mnemo.messages'::regclass
        AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT' AND p.range_from IS NOT NULL
        AND (p.range_from + interval '1 month')::date <= p_cutoff
        AND c.relname > p_after
    ORDER BY c.relname
    LIMIT p_limit
$$;

COMMENT ON FUNCTION mnemo_internal.message_months(date, text, integer) IS
'The month partitions of mnemo.messages past a cutoff, in name order, with their parents (sweep_partitions).';
