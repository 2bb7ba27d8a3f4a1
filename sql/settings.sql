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
('admission_threshold', '0.5', 'Admission score a memory candidate needs to be stored (docs/design.md §Tiers).'),
('extract_batch_messages', '40', 'Messages sent to the helper LLM per request by the extract job.'),
(
    'extract_job_messages', '100',
    'Messages one run of an extract job reads (one transaction); the rest goes on in the next run.'
),
-- Lifecycle (issue 5; docs/design.md §Lifecycle). Read by plpy/mnemo_db/lifecycle/sweeps.py.
(
    'promotion',
    '{"session": {"to": "episodic", "lambda": 0.01, "theta": 0.3, "min_access": 3},
      "episodic": {"to": "semantic", "lambda": 0.001, "theta": 0.5, "min_access": 10},
      "procedural_kinds": ["preference", "instruction", "plan"]}',
    'Promotion by utility U = mean relevance * log2(1 + accesses) / (1 + lambda * age hours) > theta.'
),
(
    'demotion',
    '{"session": {"phi": 0.05, "min_idle_hours": 24}, "episodic": {"phi": 0.01, "min_idle_hours": 168},
      "semantic": {"phi": 0, "min_idle_hours": 720}, "procedural": {"phi": 0, "min_idle_hours": 720}}',
    'Demotion/expiry when accesses per idle hour < phi after min_idle_hours (phi 0: never).'
),
('episodic_ttl_days', '90', 'Episodic memories expire this many days after promotion.'),
('session_idle_hours', '168', 'An active or paused session without activity for this long expires.'),
('session_memory_grace_hours', '24', 'Session-tier memories expire this long after their session ends.'),
('compaction_factor', '2', 'Compact a session when its active history exceeds this many context windows.'),
('compaction_keep_recent', '2', 'Newest active messages never compacted.'),
(
    'compaction_max_span_tokens', '131072',
    'Largest span compacted at once (a longer overflow takes several summaries).'
),
(
    'message_retention_months', '12',
    'History partitions older than this are detached once all their rows are compacted or pruned.'
),
('lifecycle_batch_size', '200', 'Rows (or sessions) per committed batch of a sweep.'),
('lifecycle_history_days', '7', 'Days of cron.job_run_details and sweep runs kept.'),
(
    'recall_index_min_messages', '25000',
    'Sealed messages from which a tenant gets its own recall index (compile_context reads k nearest, not all).'
),
-- Paging (issue 22; plpy/mnemo_db/paging/ladder.py DEFAULTS says what each key does).
(
    'paging',
    '{"caution": 0.5, "warning": 0.7, "critical": 0.85, "emergency": 0.95, "target": 0.6,
      "pin_turns": 8, "protect_newest": 12, "protect_hot": 30, "min_object_tokens": 500, "topic_shift": 0.7,
      "goal_shift": 0.5, "stale_after_calls": 8, "stale_to": "detail", "superseded_to": "stub",
      "outdated_after_calls": 1, "outdated_to": "stub", "quiet_after_calls": 1, "quiet_to": "stub",
      "evict_stubs_after_calls": 40, "cold_reads": true}',
    'Paging: pressure zone thresholds (history tokens / window budget), the target a zone degrades to, '
    'pin turns after a fault, protected newest objects, segmentation and waste rules.'
)
ON CONFLICT (key) DO UPDATE SET description = excluded.description;
