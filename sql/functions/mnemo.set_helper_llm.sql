-- mnemo.set_helper_llm(p_base_url, p_model, p_api_key, ...) -> void
-- Configures the helper LLM, an OpenAI-compatible chat-completions endpoint
-- (https://api.openai.com/v1, http://localhost:8000/v1 for vLLM,
-- http://localhost:11434/v1 for Ollama). The extract job then asks it for memories
-- (when extraction_method is auto or helper_llm), with p_timeout_s per request,
-- p_max_retries retries after timeouts and malformed replies (backoff p_backoff_s,
-- doubling), then falls back to the offline rules. The summaries and compaction
-- sweeps ask it for multi-fidelity summaries the same way (offline summariser as the
-- fallback). The key goes to
-- mnemo_internal.helper_llm_keys, readable by the owner only; p_api_key NULL keeps
-- the stored key ('' removes it). p_base_url NULL removes the configuration.
-- Owner only (not granted to mnemo_app). Bad input raises MN001.
-- Writes: mnemo_internal.helper_llm, mnemo_internal.helper_llm_keys.
CREATE OR REPLACE FUNCTION mnemo.set_helper_llm(
    p_base_url text,
    p_model text DEFAULT NULL,
    p_api_key text DEFAULT NULL,
    p_timeout_s real DEFAULT 20,
    p_max_retries integer DEFAULT 2,
    p_backoff_s real DEFAULT 1,
    p_enabled boolean DEFAULT true,
    p_options jsonb DEFAULT '{}'
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_base_url IS NULL THEN
        DELETE FROM mnemo_internal.helper_llm WHERE name = 'default';
        RETURN;
    END IF;
    IF p_base_url !~ '^https?://[^\s]+$' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('base_url %L is not an http(s) URL', p_base_url),
            HINT = 'e.g. https://api.openai.com/v1 or http://localhost:11434/v1';
    END IF;
    IF coalesce(p_model, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'model is required';
    END IF;
    IF p_timeout_s IS NULL OR p_timeout_s <= 0 OR p_timeout_s > 600 OR p_max_retries IS NULL
        OR p_max_retries NOT BETWEEN 0 AND 10 OR p_backoff_s IS NULL OR p_backoff_s NOT BETWEEN 0 AND 60
        OR p_enabled IS NULL OR p_options IS NULL OR jsonb_typeof(p_options) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = 'timeout_s must be in (0, 600], max_retries in 0..10, backoff_s in 0..60, options an object';
    END IF;
    -- updated_at = excluded.updated_at (its default, now()): Citus takes only IMMUTABLE
    -- functions in ON CONFLICT DO UPDATE SET
    INSERT INTO mnemo_internal.helper_llm AS h (name, base_url, model, timeout_s, max_retries, backoff_s,
        enabled, options)
    VALUES ('default', p_base_url, p_model, p_timeout_s, p_max_retries, p_backoff_s, p_enabled, p_options)
    ON CONFLICT (name) DO UPDATE
    SET base_url = excluded.base_url, model = excluded.model, timeout_s = excluded.timeout_s,
        max_retries = excluded.max_retries, backoff_s = excluded.backoff_s, enabled = excluded.enabled,
        options = excluded.options, updated_at = excluded.updated_at;
    IF p_api_key = '' THEN
        DELETE FROM mnemo_internal.helper_llm_keys WHERE name = 'default';
    ELSIF p_api_key IS NOT NULL THEN
        INSERT INTO mnemo_internal.helper_llm_keys AS k (name, api_key) VALUES ('default', p_api_key)
        ON CONFLICT (name) DO UPDATE
        SET api_key = excluded.api_key, updated_at = excluded.updated_at;
    END IF;
END;
$$;

COMMENT ON FUNCTION mnemo.set_helper_llm(text, text, text, real, integer, real, boolean, jsonb) IS
'Configures the OpenAI-compatible helper LLM used by extraction and summaries (owner only).';
