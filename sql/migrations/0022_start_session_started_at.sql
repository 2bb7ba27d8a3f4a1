-- 0022: mnemo.start_session takes p_started_at (0021). A routine file never drops
-- an older signature of itself (the deploy runs the migrations first): the old
-- signature goes here, before sql/functions/mnemo.start_session.sql creates the new.
DROP FUNCTION IF EXISTS mnemo.start_session(text, text, text, text, integer, integer, text, jsonb, uuid, uuid, jsonb);
