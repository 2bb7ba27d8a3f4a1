"""Memory formation: from a session's new messages to admitted memories.

- formation: the `extract` job's database side (deduplication, conflicts,
  admission, writes);
- extract, grammar: the offline rules and their wording;
- admission: admission control's score;
- helper_llm: the optional OpenAI-compatible helper, also used by lifecycle and paging;
- statements: the SQL formation runs.

Nothing is imported here: the SQL bodies import what they use.
"""
