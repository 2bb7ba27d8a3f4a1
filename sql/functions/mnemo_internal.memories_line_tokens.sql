-- mnemo_internal.memories_line_tokens() -> trigger
-- BEFORE INSERT OR UPDATE OF the content columns on mnemo.memories (migration
-- 0012): keeps line_tokens, the line-text tokens of content_full, content_detail,
-- content_compact and content_stub (mnemo_internal.line_tokens), in step with the
-- texts, whichever path writes them (insert_memory, the summaries job, correct, a
-- promotion).
-- deploy: before the migrations (0012 creates the trigger)
CREATE OR REPLACE FUNCTION mnemo_internal.memories_line_tokens()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    NEW.line_tokens := mnemo_internal.line_tokens(
        ARRAY[NEW.content_full, NEW.content_detail, NEW.content_compact, NEW.content_stub]);
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION mnemo_internal.memories_line_tokens() IS
'Trigger: memories.line_tokens follows the content columns.';
