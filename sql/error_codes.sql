-- The project's SQLSTATEs (class MN). Run on every deploy.
INSERT INTO mnemo_internal.error_codes AS e (sqlstate, name, description) VALUES
('MN001', 'invalid_parameter', 'An argument is missing, of the wrong type or out of range.'),
('MN002', 'unknown_tenant', 'No such tenant; create it with mnemo.create_tenant().'),
('MN003', 'unknown_session', 'No such session for this tenant.'),
('MN004', 'invalid_message', 'The message is not a valid OpenAI chat message.'),
('MN005', 'unknown_role', 'The message role is not one of system, developer, user, assistant, tool.'),
('MN006', 'unknown_tool_call', 'A tool result names a tool_call_id that no earlier assistant message issued.'),
('MN007', 'content_too_large', 'The content exceeds the configured size limit.'),
('MN008', 'tenant_access_denied', 'The current role is bound to another tenant.'),
('MN009', 'session_not_active', 'The session is closed or expired.'),
('MN010', 'not_found', 'The requested object does not exist for this tenant.'),
('MN011', 'configuration_error', 'The server is missing configuration or files Mnemosyne needs.'),
('MN012', 'duplicate', 'The object already exists.'),
('MN013', 'too_many_requests', 'The tenant has as many requests in flight as a network surface allows.'),
('MN014', 'authentication_required', 'No API key, or one that is unknown, revoked or expired.')
ON CONFLICT (sqlstate) DO UPDATE SET name = excluded.name, description = excluded.description;
