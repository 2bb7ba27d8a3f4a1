-- deploy: Citus only (scripts/deploy.sh loads sql/citus/ when the citus extension is in the database)
-- mnemo_internal.message_months(p_cutoff, p_after, p_limit) -> setof (name, parent, range_from), on Citus.
-- Replaces sql/functions/mnemo_internal.message_months.sql on a Citus coordinator,
-- where mnemo.messages has the month level only (mnemo_internal.citus_flatten_messages),
-- its months named messages_pYYYY_MM by Citus's create_time_partitions: the
-- single-server version walks the months under each hash partition and finds none here.
CREATE OR REPLACE FUNCTION mnemo_internal.message_months(p_cutoff date, p_after text, p_limit integer)
RETURNS TABLE (name name, parent name, range_from date)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT c.relname, 'messages'::name, p.range_from
    FROM pg_inherits AS mi
    JOIN pg_class AS c ON c.oid = mi.inhrelid
    CROSS JOIN LATERAL (SELECT to_date(substring(c.relname FROM '_p([0-9]{4}_[0-9]{2})$'), 'YYYY_MM')
        AS range_from) AS p
    WHERE mi.inhparent = 'mnemo.messages'::regclass
        AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT' AND p.range_from IS NOT NULL
        AND (p.range_from + interval '1 month')::date <= p_cutoff
        AND c.relname > p_after
    ORDER BY c.relname
    LIMIT p_limit
$$;

COMMENT ON FUNCTION mnemo_internal.message_months(date, text, integer) IS
'The month partitions of mnemo.messages past a cutoff, in name order, with their parents (sweep_partitions).';
