"""compile_context: the token-budgeted context for an agent's next model call.

docs/design.md §Compile is the specification. The compile runs as named phases
(phases.py), each reading what the one before produced; compiler.py runs them inside
PL/Python (the body of mnemo.compile_context_bundle). The modules:

- policy: the tables (budget split, weights, channels, history zones) and the rules
  over them (task type, budget B, score);
- options: p_options, checked once;
- statements: the SQL the phases run, with its parameter types and arguments;
- rows: what the statements return, as the phases take it;
- retrieval: the candidate pool and fusion (which candidates are worth fetching);
- history: the session's history at each fidelity, packed within a budget;
- levels: the extractive levels of texts (older turns, long items);
- packing: memory-block items, their fidelity options and the knapsack;
- bundle: the decide phase, free of database access;
- phases, compiler: the pipeline, and its PL/Python runner.

Nothing is imported here: the SQL bodies import what they use (message_levels needs
no numpy).
"""
