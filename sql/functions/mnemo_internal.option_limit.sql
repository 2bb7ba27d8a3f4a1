-- mnemo_internal.option_limit(p_options, p_default, p_max) -> integer
-- The "limit" option of a listing API function: a JSON number from 1 to p_max, or
-- p_default when absent. Raises MN001 for another value; a fractional one passes the
-- range check and fails the integer cast (invalid_text_representation, which the
-- caller may turn into its own message).
CREATE OR REPLACE FUNCTION mnemo_internal.option_limit(p_options jsonb, p_default integer, p_max integer)
RETURNS integer
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF coalesce(jsonb_typeof(p_options -> 'limit'), 'number') <> 'number'
        OR coalesce((p_options ->> 'limit')::numeric, p_default) NOT BETWEEN 1 AND p_max THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('options.limit must be a number from 1 to %s', p_max);
    END IF;
    RETURN coalesce((p_options ->> 'limit')::integer, p_default);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.option_limit(jsonb, integer, integer) IS
'The limit option of a listing function: a number from 1 to p_max, else MN001; p_default when absent.';
