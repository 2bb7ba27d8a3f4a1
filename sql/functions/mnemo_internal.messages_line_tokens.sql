-- mnemo_internal.messages_line_tokens() -> trigger
-- BEFORE INSERT OR UPDATE OF content on mnemo.messages (migration 0012): keeps
-- line_tokens, the line-text tokens of content (mnemo_internal.line_tokens; NULL
-- without text content), in step with it, whichever path writes a message. An
-- INSERT that brings line_tokens keeps it: mnemo.record_messages counts it with the
-- message's own tokens, in one call for the batch (one PL/Python call per row less).
-- deploy: before the migrations (0012 creates the trigger)
CREATE OR REPLACE FUNCTION mnemo_internal.messages_line_tokens()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.line_tokens IS NOT NULL THEN
        RETURN NEW;
    END IF;
    NEW.line_tokens := (mnemo_internal.line_tokens(ARRAY[NEW.content]))[1];
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION mnemo_internal.messages_line_tokens() IS
'Trigger: messages.line_tokens follows content.';
