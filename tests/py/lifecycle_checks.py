"""Checks shared by the lifecycle tests: the promises of declared losses (docs/design.md §Fidelity ladder)."""

from __future__ import annotations

import re

from mnemo_db import tokens

LADDER = ("full", "detail", "compact", "stub")


def present(entity: str, text: str) -> bool:
    return re.search(r"(?<![\w.])" + re.escape(entity) + r"(?![\w])", text) is not None


def check_levels(full: str, levels: dict) -> None:
    """levels: {name: {"text", "tokens", "losses"}} as stored or as summarize_json gives.

    Every entity declared kept appears in the level's text; every declared loss is
    absent; token counts are true; each level is no longer than the one above; losses
    accumulate down the ladder; the stub is one bracketed line."""
    above_tokens, above_dropped, above_fault = tokens.count(full), set(), []
    for name in LADDER[1:]:
        lv = levels.get(name)
        if not lv:
            continue
        text, losses = lv["text"], lv["losses"]
        assert lv["tokens"] == tokens.count(text), f"{name}: token count"
        assert lv["tokens"] <= above_tokens, f"{name}: {lv['tokens']} tokens > {above_tokens} above"
        for e in losses["key_entities"]:
            assert present(e, text), f"{name}: kept entity {e!r} not in the text"
        for e in losses["dropped"]:
            assert not present(e, text), f"{name}: dropped entity {e!r} is in the text"
        assert set(losses.keys()) >= {"dropped", "can_answer", "fault_when", "key_entities"}
        listed = set(losses["dropped"])
        if len(losses["dropped"]) < 24:  # lists are capped; below the cap they accumulate
            assert above_dropped - {e for e in above_dropped if present(e, text)} <= listed, name
        assert losses["fault_when"][: len(above_fault)] == above_fault, f"{name}: fault_when accumulates"
        above_tokens, above_dropped, above_fault = lv["tokens"], listed, losses["fault_when"]
    stub = levels["stub"]["text"]
    assert "\n" not in stub
    # the stub format, unless the text is shorter than the shortest stub ("[kind]")
    assert stub.startswith("[") and stub.endswith("]") or stub == " ".join(full.split())
