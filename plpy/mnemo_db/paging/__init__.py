"""Paging (docs/design.md §Semantic objects and paging): the context window as a managed cache.

- sources.py: what a tool call reads or writes (file path and lines, URL), and what
  kind of object its result is (file_context, tool_result, error_context);
- shell.py: what a shell command reads and writes (chains, pipes, several files,
  heredocs), the parser bench/replay.py uses too;
- tags.py: the cleanup tags an assistant writes (drop, summarize, anchor, collapse,
  declare_losses);
- ladder.py: the fidelity ladder, the pressure zones and the fidelity manager's
  decisions under pressure and on a goal shift (pure functions);
- answer.py: memory_query's answers, extractive offline or by the helper LLM;
- store.py: the database side, for record_message (segmentation, faults, waste,
  tags), compile_context (pressure), the phantom tools and the metrics.
"""
