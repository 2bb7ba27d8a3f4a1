-- mnemo.start_session(...) -> uuid
-- Opens a conversation session for a tenant: agent, channel (private | team | public |
-- agent, which drives privacy filtering), model, context window, response reserve,
-- system prompt (stored once per tenant by SHA-256 in mnemo.system_prompts, with its
-- token count), config. Returns the session id (p_session_id if given). Secrets in the
-- agent id, model, system prompt, config and metadata are redacted before they are
-- stored (as record_message). p_started_at: when the session took place, for a
-- conversation imported from the past (the importers pass it; migration 0022 drops
-- the signature without it, and calls written for that one still work, as it has a
-- default); compile_context then takes the session's own time as "now" (freshness, "last Tuesday"): the newer of
-- p_started_at and its newest message. NULL: a live session, on the real clock.
-- Raises MN001 (bad argument), MN002 (unknown tenant), MN003 (unknown parent session),
-- MN012 (session id already used). Writes: sessions, system_prompts.
CREATE OR REPLACE FUNCTION mnemo.start_session(
    p_tenant_id text,
    p_agent_id text DEFAULT 'default',
    p_channel text DEFAULT 'private',
    p_model text DEFAULT 'gpt-4o',
    p_context_window integer DEFAULT 128000,
    p_response_reserve integer DEFAULT 4096,
    p_system_prompt text DEFAULT NULL,
    p_config jsonb DEFAULT '{}',
    p_session_id uuid DEFAULT NULL,
    p_parent_session_id uuid DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}',
    p_started_at timestamptz DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_session_id uuid := coalesce(p_session_id, gen_random_uuid());
    v_prompt_hash bytea;
    v_prompt_tokens integer := 0;
    v_red jsonb;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    IF p_agent_id IS NULL OR p_agent_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'agent_id must not be empty';
    END IF;
    IF p_channel IS NULL OR p_channel NOT IN ('private', 'team', 'public', 'agent') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown channel %L', p_channel),
            HINT = 'channel is one of private, team, public, agent';
    END IF;
    PERFORM mnemo_internal.check_session_model(p_model, p_context_window, p_response_reserve);
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object'
        OR p_metadata IS NULL OR jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'config and metadata must be JSON objects';
    END IF;
    PERFORM mnemo_internal.checked_timestamp(p_started_at, 'started_at');
    PERFORM mnemo_internal.check_json_depth(p_config, 'config');
    PERFORM mnemo_internal.check_json_depth(p_metadata, 'metadata');
    IF p_parent_session_id IS NOT NULL AND NOT EXISTS (
        SELECT FROM mnemo.sessions AS s
        WHERE s.tenant_id = p_tenant_id AND s.session_id = p_parent_session_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN003',
            MESSAGE = format('unknown parent session %s', p_parent_session_id);
    END IF;

    v_red := mnemo_internal.redacted(p_tenant_id, jsonb_build_object('p', p_system_prompt, 'md', p_metadata,
        'agent', p_agent_id, 'model', p_model, 'config', p_config));
    IF v_red IS NOT NULL THEN
        p_system_prompt := v_red #>> '{value,p}';
        p_agent_id := v_red #>> '{value,agent}';
        p_model := v_red #>> '{value,model}';
        p_config := v_red #> '{value,config}';
        p_metadata := (v_red #> '{value,md}') || jsonb_build_object('redactions', v_red -> 'kinds');
    END IF;
    IF p_system_prompt IS NOT NULL THEN
        v_prompt_hash := sha256(convert_to(p_system_prompt, 'UTF8'));
        SELECT sp.token_count INTO v_prompt_tokens FROM mnemo.system_prompts AS sp
        WHERE sp.tenant_id = p_tenant_id AND sp.prompt_hash = v_prompt_hash;
        IF NOT FOUND THEN
            v_prompt_tokens := mnemo_internal.message_tokens(
                jsonb_build_object('role', 'system', 'content', p_system_prompt));
            INSERT INTO mnemo.system_prompts (tenant_id, prompt_hash, content, token_count)
            VALUES (p_tenant_id, v_prompt_hash, p_system_prompt, v_prompt_tokens)
            ON CONFLICT DO NOTHING;
        END IF;
    END IF;

    BEGIN
        INSERT INTO mnemo.sessions (
            tenant_id, session_id, agent_id, channel, model, context_window, response_reserve,
            system_prompt_hash, system_prompt_tokens, config, parent_session_id, metadata, started_at)
        VALUES (
            p_tenant_id, v_session_id, p_agent_id, p_channel, p_model, p_context_window,
            p_response_reserve, v_prompt_hash, v_prompt_tokens, p_config, p_parent_session_id,
            p_metadata, p_started_at);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION USING ERRCODE = 'MN012',
            MESSAGE = format('session %s already exists', v_session_id);
    END;
    RETURN v_session_id;
END;
$$;

COMMENT ON FUNCTION mnemo.start_session(
    text, text, text, text, integer, integer, text, jsonb, uuid, uuid, jsonb, timestamptz
) IS
'Opens a session for a tenant and returns its id.';
