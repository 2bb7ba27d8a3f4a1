-- 0021: a session knows its own time. started_at is the time the caller gave
-- mnemo.start_session (p_started_at: a conversation imported from the past); NULL
-- for a session started live, which runs on the real clock. compile_context takes
-- the session's time as "now" for freshness and relative dates (the as_of option
-- still wins). created_at stays the row's own time: expiry and listing by age keep
-- meaning what they meant.
ALTER TABLE mnemo.sessions ADD COLUMN started_at timestamptz;
