"""The lifecycle: what pg_cron's Python sweeps do with memories and sessions.

- sweeps: the sweeps' database side (one batch per call), with its SQL in statements;
- rules: the decisions (promotion, demotion, expiry, compaction), free of the database;
- summarize, llm_summarize: multi-fidelity summaries, offline and by the helper LLM.

Nothing is imported here: the SQL bodies import what they use.
"""
