-- mnemo.open_session(p_tenant_id, p_session_key, ...) -> uuid
-- The session a stable key stands for, opened on first use (idempotent): the
-- transparent proxy's sessions, whose clients name none. The key is the client's
-- own session name (X-Mnemo-Session) or one derived from the conversation (a hash of
-- its system prompt and first user message). A key that is a UUID of an existing
-- session of the tenant adopts that session; one that is a UUID of none opens the
-- session under that id.
-- The other arguments are start_session's, for the session it opens. On later calls
-- the session takes this call's model, context window and response reserve (what
-- compile_context budgets with), so a client that changes max_tokens or model is
-- budgeted for the call it makes. A new session (parent_session_id: the previous
-- one) replaces the key's session when that one is closed or expired, or when the
-- client's system prompt changed: the stored prompt is what the session's compiles
-- are budgeted and formed with, and sessions never change theirs. A call without a
-- system prompt (the HTTP API naming a session: docs/design.md §Surfaces) takes the key's session as is.
-- Raises MN001 (empty or over-long key, bad argument: mnemo_internal.check_session_model),
-- MN002 (unknown tenant).
-- Writes: sessions, system_prompts (through start_session), transcripts.
CREATE OR REPLACE FUNCTION mnemo.open_session(
    p_tenant_id text,
    p_session_key text,
    p_agent_id text DEFAULT 'default',
    p_channel text DEFAULT 'private',
    p_model text DEFAULT 'gpt-4o',
    p_context_window integer DEFAULT 128000,
    p_response_reserve integer DEFAULT 4096,
    p_system_prompt text DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}'
) RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_prompt_hash bytea;
    v_session_id uuid;
    v_known_hash bytea;
    v_status text;
    v_key_uuid uuid;
    v_parent uuid;
    v_red jsonb;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    PERFORM mnemo_internal.check_json_depth(p_metadata, 'metadata');
    -- here, not only in start_session: a call that finds its session stores these too
    PERFORM mnemo_internal.check_session_model(p_model, p_context_window, p_response_reserve);
    IF p_session_key IS NULL OR p_session_key = '' OR length(p_session_key) > 512 THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'session_key must be 1 to 512 characters';
    END IF;
    IF p_system_prompt IS NOT NULL THEN
        v_prompt_hash := sha256(convert_to(p_system_prompt, 'UTF8'));
    END IF;
    -- One opener per key at a time: two first calls of one conversation open one session.
    PERFORM pg_advisory_xact_lock(hashtext('mnemo.open_session'), hashtext(p_tenant_id || '/' || p_session_key));

    SELECT t.session_id, t.prompt_hash, s.status INTO v_session_id, v_known_hash, v_status
    FROM mnemo.transcripts AS t
    LEFT JOIN mnemo.sessions AS s ON s.tenant_id = t.tenant_id AND s.session_id = t.session_id
    WHERE t.tenant_id = p_tenant_id AND t.session_key = p_session_key;
    IF FOUND AND v_status IN ('active', 'paused')
        AND (p_system_prompt IS NULL OR v_known_hash IS NOT DISTINCT FROM v_prompt_hash) THEN
        v_red := mnemo_internal.redacted(p_tenant_id, to_jsonb(p_model));  -- as start_session stores it
        IF v_red IS NOT NULL THEN
            p_model := v_red #>> '{value}';
        END IF;
        UPDATE mnemo.sessions AS s
        SET model = p_model, context_window = p_context_window, response_reserve = p_response_reserve,
            updated_at = now()
        WHERE s.tenant_id = p_tenant_id AND s.session_id = v_session_id
            AND (s.model, s.context_window, s.response_reserve)
            IS DISTINCT FROM (p_model, p_context_window, p_response_reserve);
        RETURN v_session_id;
    END IF;
    v_parent := v_session_id;  -- the key's previous session, if it had one

    IF v_parent IS NULL AND p_session_key ~* '^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$' THEN
        v_key_uuid := p_session_key::uuid;
        SELECT s.status INTO v_status FROM mnemo.sessions AS s
        WHERE s.tenant_id = p_tenant_id AND s.session_id = v_key_uuid;
        IF v_status IN ('active', 'paused') THEN
            -- (a session already bound to another key keeps that transcript: sync_messages
            -- finds it by the session's id, whichever key opened it)
            INSERT INTO mnemo.transcripts (tenant_id, session_key, session_id, prompt_hash)
            VALUES (p_tenant_id, p_session_key, v_key_uuid, v_prompt_hash) ON CONFLICT DO NOTHING;
            RETURN v_key_uuid;
        ELSIF v_status IS NOT NULL THEN
            v_parent := v_key_uuid;
            v_key_uuid := NULL;
        END IF;
    END IF;

    v_session_id := mnemo.start_session(
        p_tenant_id => p_tenant_id, p_agent_id => p_agent_id, p_channel => p_channel,
        p_model => p_model, p_context_window => p_context_window,
        p_response_reserve => p_response_reserve, p_system_prompt => p_system_prompt,
        p_session_id => v_key_uuid, p_parent_session_id => v_parent, p_metadata => p_metadata);
    -- updated_at = excluded.updated_at (its default, now()): Citus takes only IMMUTABLE
    -- functions in ON CONFLICT DO UPDATE SET
    INSERT INTO mnemo.transcripts (tenant_id, session_key, session_id, prompt_hash)
    VALUES (p_tenant_id, p_session_key, v_session_id, v_prompt_hash)
    ON CONFLICT (tenant_id, session_key) DO UPDATE
    SET session_id = excluded.session_id, prompt_hash = excluded.prompt_hash,
        wire_hashes = '{}', message_ids = '{}', updated_at = excluded.updated_at;
    RETURN v_session_id;
END;
$$;

COMMENT ON FUNCTION mnemo.open_session(text, text, text, text, text, integer, integer, text, jsonb) IS
'The session a stable key stands for (the proxy''s), opened on first use.';
