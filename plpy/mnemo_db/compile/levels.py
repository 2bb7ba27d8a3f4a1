"""The extractive levels (summarize.py) of the messages a context may abbreviate:
the full ladder the embed job stores, and the stub a compile offers until it has."""

from __future__ import annotations

from datetime import datetime

from .. import tokens
from ..lifecycle import summarize


def when(ts: datetime | None) -> str:
    """A timestamp as the levels' date line shows it."""
    return ts.strftime("%Y-%m-%d %H:%M") if ts else ""


def _kind(m: dict) -> str:
    return "tool_result" if m["role"] == "tool" else "message"


def _when(m: dict) -> str | None:
    """The time a message's levels show: none for a tool's output, which its call
    places in the session (a stub of one was a third date)."""
    return None if m.get("role") == "tool" else when(m.get("created_at"))


def message_levels(m: dict) -> dict | None:
    """A stored message's extractive levels ({level: {text, tokens, losses}}), or None
    when its text is too short to abbreviate. Each message's embed job stores them
    (messages.levels, via mnemo_internal.message_levels), so that no compile
    summarises. m: content, role, token_count, created_at."""
    text = m.get("content") or ""
    # The stored token count (text plus framing, never less than the text alone) rules
    # out most short messages without tokenising them.
    stored = m.get("token_count")
    if ((stored is not None and stored < summarize.MIN_TOKENS_FOR_SUMMARY)
            or tokens.count(text) < summarize.MIN_TOKENS_FOR_SUMMARY):
        return None
    return summarize.summarize_json(text, _kind(m), _when(m))


def pending_levels(m: dict) -> dict | None:
    """What a compile offers below full fidelity of a message whose embed job has not
    stored its levels yet: the stub alone (summarize.stub_json), or None for a short
    one. A compile never summarises, nor counts a whole text it will not send: both
    cost milliseconds a long turn, paid by the first compile over a freshly written
    history (docs/performance.md, first compiles). So the stored token count (text
    plus framing) stands for the text's here; until its job runs, such a
    turn is sent full, as a stub, or not at all."""
    text = m.get("content") or ""
    # a token holds at least one character: fewer characters than the minimum is short
    if len(text) < summarize.MIN_TOKENS_FOR_SUMMARY:
        return None
    n = m.get("token_count")
    n = tokens.count(text) if n is None else n
    if n < summarize.MIN_TOKENS_FOR_SUMMARY:
        return None
    return summarize.stub_json(text, _kind(m), _when(m), n)
