-- Default settings, run on every deploy. Existing values are kept, so an operator's
-- change survives re-deploys; descriptions are refreshed.
INSERT INTO mnemo_internal.settings AS s (key, value, description) VALUES
(
    'hash_partitions', '8',
    'Hash partitions per tenant table, fixed at the first deploy (production: 64-256).'
),
(
    'artifact_threshold_bytes', '65536',
    'A tool output larger than this keeps an excerpt in the message and its bytes in mnemo.artifacts.'
),
('excerpt_bytes', '8192', 'Size of the excerpt kept in a message whose output went to an artifact.'),
('max_message_bytes', '1048576', 'Largest content accepted for a non-tool message.'),
('max_artifact_bytes', '104857600', 'Largest tool output accepted (stored as an artifact).'),
('job_max_tries', '5', 'Attempts before a job is marked failed.'),
('job_backoff_seconds', '10', 'First retry delay; doubles with every failed attempt.'),
('message_partition_months_ahead', '3', 'Monthly history partitions kept ready ahead of time.'),
('python_path', '""', 'Server-side directories PL/Python imports from (set by the deploy; owner-only).'),
('model_dir', '""', 'Server-side directory of the ONNX embedding model (set by the deploy).'),
('embed_threads', '1', 'onnxruntime threads per backend for embeddings.'),
('redaction_enabled', 'true', 'Redact secrets on the write path (a tenant''s config.redaction.enabled overrides).'),
(
    'extraction_method', '"auto"',
    'Memory extraction: auto (helper LLM when configured, else offline), offline, helper_llm or off.'
),
('dedup_threshold', '0.92', 'Cosine above which a new memory merges into an existing one (near duplicate).'),
('admission_threshold', '0.5', 'Admission score a memory candidate needs to be stored (seed 002 §9).'),
('extract_batch_messages', '40', 'Messages sent to the helper LLM per request by the extract job.')
ON CONFLICT (key) DO UPDATE SET description = excluded.description;
