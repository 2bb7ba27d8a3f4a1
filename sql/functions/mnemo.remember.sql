-- mnemo.remember(p_tenant_id, p_content, p_kind, p_session_id, p_options) -> bigint
-- Stores a memory directly (no admission control). Idempotent by content hash: the
-- same normalised text returns the existing current memory's id and changes nothing.
-- A fact given as p_options.fact {subject, predicate, object, functional (default
-- true)} supersedes the subject's current value of that predicate. Secrets in the
-- content and in every string of p_options (entities, tags, fact ...) are redacted
-- before anything is stored. Durable kinds (fact, preference, instruction, decision) are tenant-wide
-- (scope global) unless p_options.scope says otherwise.
--   p_options: fact, scope (local|global), confidence (0..1), tags[], sensitivity,
--   entities[], rationale[] / alternatives[] (decisions), due_at (tasks),
--   source_message_ids[], pinned.
-- Bad input raises MN001 (MN002 tenant, MN003 session, MN010 a source message that
-- is not the tenant's) and writes nothing.
CREATE OR REPLACE FUNCTION mnemo.remember(
    p_tenant_id text,
    p_content text,
    p_kind text DEFAULT 'note',
    p_session_id uuid DEFAULT NULL,
    p_options jsonb DEFAULT '{}'
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- runs as mnemo_api_owner, under row-level security (sql/grants.sql)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_key text;
    v_red jsonb;
BEGIN
    PERFORM mnemo_internal.enter_tenant(p_tenant_id);
    v_red := mnemo_internal.redacted(p_tenant_id, jsonb_build_object('c', p_content, 'o', p_options));
    IF v_red IS NOT NULL THEN
        p_content := v_red #>> '{value,c}';
        p_options := v_red #> '{value,o}';
    END IF;
    IF p_content IS NULL OR btrim(p_content) = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'content is required';
    END IF;
    IF octet_length(p_content) > (mnemo_internal.setting('max_message_bytes'))::integer THEN
        RAISE EXCEPTION USING ERRCODE = 'MN007', MESSAGE = format('memory content is %s bytes; the limit is %s',
            octet_length(p_content), mnemo_internal.setting('max_message_bytes'));
    END IF;
    IF p_kind IS NULL OR p_kind NOT IN ('fact', 'preference', 'instruction', 'decision', 'task', 'open_loop',
        'note', 'plan', 'file_context', 'tool_result', 'error_context', 'external_reference') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown memory kind %L', p_kind),
            HINT = 'kind is one of fact, preference, instruction, decision, task, open_loop, note, plan, '
                'file_context, tool_result, error_context, external_reference';
    END IF;
    IF p_options IS NULL OR jsonb_typeof(p_options) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options must be a JSON object';
    END IF;
    PERFORM mnemo_internal.check_json_depth(p_options, 'options');
    SELECT k INTO v_key FROM jsonb_object_keys(p_options) AS k
    WHERE k NOT IN ('fact', 'scope', 'confidence', 'tags', 'sensitivity', 'entities', 'rationale',
        'alternatives', 'due_at', 'source_message_ids', 'pinned', 'provenance_type') LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('unknown option %L', v_key);
    END IF;
    IF p_options ? 'fact' AND (jsonb_typeof(p_options -> 'fact') <> 'object'
        OR coalesce(jsonb_typeof(p_options #> '{fact,subject}'), '') <> 'string'
        OR coalesce(jsonb_typeof(p_options #> '{fact,predicate}'), '') <> 'string'
        OR coalesce(jsonb_typeof(p_options #> '{fact,object}'), '') <> 'string') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = 'options.fact needs string subject, predicate and object';
    END IF;
    IF coalesce(p_options ->> 'scope', 'local') NOT IN ('local', 'global')
        OR coalesce(p_options ->> 'sensitivity', 'none') NOT IN ('none', 'low', 'high', 'secret')
        OR coalesce(p_options ->> 'provenance_type', 'user_stated') NOT IN ('user_stated', 'correction',
            'instruction', 'preference', 'fact', 'system_inferred', 'tool_output') THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options.scope, sensitivity or provenance_type is invalid';
    END IF;
    IF p_options ? 'confidence' AND (jsonb_typeof(p_options -> 'confidence') <> 'number'
        OR (p_options ->> 'confidence')::numeric NOT BETWEEN 0 AND 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'options.confidence must be a number in [0, 1]';
    END IF;
    IF p_options ? 'confidence' THEN
        -- stored as real: 6 decimals (a value like 1e-234 would underflow it)
        p_options := jsonb_set(p_options, '{confidence}', to_jsonb(round((p_options ->> 'confidence')::numeric, 6)));
    END IF;
    SELECT k INTO v_key FROM unnest(ARRAY['tags', 'entities', 'rationale', 'alternatives']) AS k
    WHERE p_options ? k AND (jsonb_typeof(p_options -> k) <> 'array'
        OR jsonb_path_exists(p_options -> k, 'strict $[*] ? (@.type() != "string")', '{}', true)) LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = format('options.%s must be an array of strings', v_key);
    END IF;
    IF p_options ? 'source_message_ids' AND (jsonb_typeof(p_options -> 'source_message_ids') <> 'array'
        OR jsonb_path_exists(p_options -> 'source_message_ids',
            'strict $[*] ? (@.type() != "number" || @ != @.floor() || @ < 1 || @ > 9223372036854775807)', '{}', true)) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = 'options.source_message_ids must be an array of message ids (positive integers)';
    END IF;
    SELECT k INTO v_key FROM unnest(ARRAY['{pinned}', '{fact,functional}']::text []) AS k
    WHERE coalesce(jsonb_typeof(p_options #> k::text []), 'boolean') <> 'boolean' LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001',
            MESSAGE = format('options.%s must be true or false', array_to_string(v_key::text [], '.'));
    END IF;
    PERFORM mnemo_internal.checked_timestamp(p_options ->> 'due_at', 'options.due_at');
    -- Provenance names this tenant's messages only (another tenant's id, or none at
    -- all, would leave the memory citing what it cannot show).
    SELECT x.id INTO v_key FROM jsonb_array_elements_text(coalesce(p_options -> 'source_message_ids', '[]')) AS x (id)
    WHERE NOT EXISTS (SELECT FROM mnemo.messages AS m
        WHERE m.tenant_id = p_tenant_id AND m.message_id = x.id::bigint) LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MN010',
            MESSAGE = format('options.source_message_ids: no message %s for tenant %L', v_key, p_tenant_id);
    END IF;
    IF p_session_id IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.sessions AS s
        WHERE s.tenant_id = p_tenant_id AND s.session_id = p_session_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'MN003', MESSAGE = format('unknown session %s', p_session_id);
    END IF;
    RETURN mnemo_internal.form_memory(p_tenant_id, 'remember', jsonb_build_object(
        'content', p_content, 'kind', p_kind, 'session_id', p_session_id, 'options', p_options));
EXCEPTION
    WHEN invalid_text_representation OR invalid_datetime_format OR datetime_field_overflow THEN
        RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = 'malformed option value: ' || SQLERRM;
END;
$$;

COMMENT ON FUNCTION mnemo.remember(text, text, text, uuid, jsonb) IS
'Stores a memory directly (idempotent by content hash); returns its id.';
