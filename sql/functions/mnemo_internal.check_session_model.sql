-- mnemo_internal.check_session_model(p_model, p_context_window, p_response_reserve) -> void
-- The one check of what a session is budgeted with, for every path that stores it:
-- start_session (a new session) and open_session (a session that takes each call's
-- model and window; its update path stored NULLs unchecked: 23502 found by the
-- fuzz). The model is not empty, the window 256 to 10,000,000 tokens, the
-- reserve at least 0 and below the window. Raises MN001; writes nothing.
CREATE OR REPLACE FUNCTION mnemo_internal.check_session_model(
    p_model text,
    p_context_window integer,
    p_response_reserve integer
) RETURNS void
LANGUAGE plpgsql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_model IS NULL OR p_model = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'model must not be empty';
    END IF;
    IF p_context_window IS NULL OR p_context_window < 256 OR p_context_window > 10000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('context_window must be between 256 and 10000000 tokens, got %s', p_context_window);
    END IF;
    IF p_response_reserve IS NULL OR p_response_reserve < 0 OR p_response_reserve >= p_context_window THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('response_reserve must be >= 0 and below the context window, got %s', p_response_reserve);
    END IF;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.check_session_model(text, integer, integer) IS
'Checks a session''s model, context window and response reserve (MN001).';
