"""The extractive levels (summarize.py) of the texts a context may abbreviate: older
history turns and long memories or recalled messages."""

from __future__ import annotations

import functools
from datetime import datetime

from .. import tokens
from ..lifecycle import summarize

# The extractive levels of a text, memoised per backend: stored messages never change,
# and an agent compiles the same session before every model call, so without this the
# same older turns are summarised again at every compile. The levels are read, never
# modified, by the callers.
summary_levels = functools.lru_cache(maxsize=2048)(summarize.summarize_json)


def when(ts: datetime | None) -> str:
    """A timestamp as the levels' date line shows it."""
    return ts.strftime("%Y-%m-%d %H:%M") if ts else ""


def message_levels(m: dict) -> dict | None:
    """A stored message's extractive levels ({level: {text, tokens, losses}}), or None
    when its text is too short to abbreviate. Each message's embed job stores them
    (messages.levels, via mnemo_internal.message_levels) so that compiles read them
    instead of summarising older turns again; this computes them where they are not
    stored yet. m: content, role, token_count, created_at."""
    text = m.get("content") or ""
    # The stored token count (text plus framing, never less than the text alone) rules
    # out most short messages without tokenising them.
    stored = m.get("token_count")
    if ((stored is not None and stored < summarize.MIN_TOKENS_FOR_SUMMARY)
            or tokens.count(text) < summarize.MIN_TOKENS_FOR_SUMMARY):
        return None
    kind = "tool_result" if m["role"] == "tool" else "message"
    return summary_levels(text, kind, when(m.get("created_at")))
