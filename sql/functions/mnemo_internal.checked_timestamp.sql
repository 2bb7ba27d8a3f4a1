-- mnemo_internal.checked_timestamp(p_value, p_name) -> timestamptz
-- The one range check for every timestamp the API accepts (record_message's and
-- record_event's p_created_at, a task's due_at, remember's options.due_at, forget's
-- created_before / created_after, compile_context's as_of): finite, and from
-- 0002-01-01 to 9998-12-31 (UTC). Why that range: the PL/Python code reads every
-- stored timestamp as a Python datetime, which holds years 1 to 9999 (a row outside
-- them failed every compile of its tenant), and computes dates from them (a due date
-- "by Friday", an expiry 30 days on, the same day next year), so a year is kept free
-- at each end. NULL passes (the caller's default applies). Raises MN001 naming
-- p_name; writes nothing.
-- The text overload parses a JSON option's string first (MN001 when it is not a
-- timestamp at all).
CREATE OR REPLACE FUNCTION mnemo_internal.checked_timestamp(p_value timestamptz, p_name text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_value IS NOT NULL AND NOT (p_value >= '0002-01-01 00:00:00+00'::timestamptz
        AND p_value < '9999-01-01 00:00:00+00'::timestamptz) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('%s must be a finite timestamp from 0002-01-01 to 9998-12-31 (UTC), got %s',
                p_name, p_value),
            HINT = 'infinity, -infinity and dates BC are refused.';
    END IF;
    RETURN p_value;
END;
$$;

CREATE OR REPLACE FUNCTION mnemo_internal.checked_timestamp(p_value text, p_name text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_ts timestamptz;
BEGIN
    BEGIN
        v_ts := p_value::timestamptz;
    EXCEPTION WHEN data_exception THEN  -- (class 22: any text that is not a timestamp)
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('%s must be a timestamp, got %s', p_name, left(p_value, 100)),
            HINT = 'e.g. 2025-06-01T12:00:00Z';
    END;
    RETURN mnemo_internal.checked_timestamp(v_ts, p_name);
END;
$$;

COMMENT ON FUNCTION mnemo_internal.checked_timestamp(timestamptz, text) IS
'The API''s timestamp range check: finite, 0002-01-01 to 9998-12-31 UTC, else MN001.';
COMMENT ON FUNCTION mnemo_internal.checked_timestamp(text, text) IS
'Parses a timestamp option and applies the API''s range check (MN001).';
