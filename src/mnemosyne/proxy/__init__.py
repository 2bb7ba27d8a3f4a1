"""Mnemosyne's transparent proxy (`mnemo serve`): point an agent's OPENAI_BASE_URL or
ANTHROPIC_BASE_URL at it and change nothing else. It records each conversation
(only what is new), replaces the messages of every model call with the compiled
context, answers the model's memory tool calls itself, and passes every other path
through. All memory logic is the database's: the proxy calls SQL functions only.

- app.py: the HTTP surface, identity, pass-through, the HTTP API (docs/usage/http-api.md)
- memory.py: the SQL calls (open_session, sync_messages, compile_context_bundle,
  handle_tool_call) and the bypass when the database is unreachable
- relay.py: answers on their way back, phantom tool calls intercepted
- anthropic_format.py: Anthropic Messages <-> OpenAI chat messages
- scripted.py: a scripted provider for the tests and the benchmark
"""

from .app import create_app
from .config import Config

__all__ = ["Config", "create_app"]
