-- mnemo_internal.check_json_depth(p_value, p_name) -> void
-- The one nesting limit for every JSON argument of the API: at most 64 levels (a
-- message, its metadata or an options object needs a handful). Deeper JSON reached
-- Python's recursion limit in the PL/Python code (json.loads, the redaction walk)
-- only on some paths, so whether a call succeeded depended on its content; checked
-- here up front, the same input is refused the same way everywhere. The jsonpath
-- walk runs in C (~0.5 us for a message). NULL passes (callers check presence and
-- type themselves). Raises MN001 naming p_name.
CREATE OR REPLACE FUNCTION mnemo_internal.check_json_depth(p_value jsonb, p_name text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF jsonb_path_exists(p_value, 'strict $.**{65}') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('%s is nested deeper than 64 levels', p_name);
    END IF;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.check_json_depth(jsonb, text) IS
'Refuses JSON nested deeper than 64 levels (MN001): the API''s one nesting limit.';
