"""Multi-fidelity summaries written by the helper LLM (docs/design.md §Fidelity ladder), checked strictly.

`summarize` sends one request with a prompt, extended to ask for the
whole ladder at once (detail ~30 %, compact ~5 %, the one-line stub) as JSON, each level
with its declared losses. The reply is validated before anything is trusted:

- every level is an object with a non-empty `summary` string and the lists `losses`,
  `can_answer`, `fault_when`, `key_entities` (strings only);
- each level is no longer, in tokens (`tokens.count`), than the level above (detail
  than the source);
- the stub is one line in the stub format `[kind | time | description | N related]`;
- every declared key entity occurs in the level's text, no declared loss does.

A reply that breaks any rule raises MalformedReply, which helper_llm.chat_json retries
like a timeout; when the retries are spent it raises HelperLLMError and the caller
(lifecycle.sweeps) falls back to the offline summariser (summarize.py) for that item.

The accepted levels are summarize.Level objects, like the offline ones, with losses
that accumulate down the ladder as summarize.py's do: `dropped` starts with what the
level above dropped (unless the text has it again) and adds the LLM's declared losses
and the source's identifiers, paths, numbers and codes absent from the text (computed
exactly, as offline), declared losses first since the list is capped; `fault_when` starts with the level above's; `key_entities` are
the LLM's (checked) and the source's entities present in the text.
"""

from __future__ import annotations

import json
import time

from .. import tokens
from ..formation import helper_llm
from ..formation.helper_llm import MalformedReply
from . import summarize

SYSTEM = "You are a context compression engine for a coding agent. Reply with one JSON object only."
# The ladder's prompt, asking for the three levels in one reply.
PROMPT = """Summarize the following content while preserving maximum utility for future reference.

CONTENT TYPE: {kind}
CONTENT ({full_tokens} tokens):
{content}

INSTRUCTIONS:
1. Write a detailed summary (~30% of original length, at most {detail_max} tokens).
2. MUST preserve: file paths, function names, variable names, library names, error messages,
   decision rationale, specific values that may be referenced later.
3. List DECLARED LOSSES: specific information you omitted that someone might need. Be precise --
   "specific error codes" not "some details". A loss must not appear word for word in the summary.
4. List CAN_ANSWER: categories of questions this summary can answer without needing the original.
5. List FAULT_WHEN: when a reader would need the original content instead.
6. List KEY_ENTITIES: entities kept in the summary, each written exactly as it appears in it.
7. Then compress the detailed summary into a compact summary (~5% of the original, at most
   {compact_max} tokens, never longer than the detailed one), with the losses it adds.
8. Then write the stub: ONE line, never longer than the compact summary, exactly
   {stub_format}

OUTPUT FORMAT (JSON):
{{"detail": {{"summary": "...", "losses": ["exact error code for token expiry", ...],
   "can_answer": ["auth approach used", ...], "fault_when": ["need the exact error code", ...],
   "key_entities": ["src/auth/middleware.ts", "handleAuth()", ...]}},
 "compact": {{"summary": "...", "losses": [...], "can_answer": [...], "fault_when": [...], "key_entities": [...]}},
 "stub": {{"summary": "{stub_example}", "losses": [...], "can_answer": [...], "fault_when": [...],
   "key_entities": [...]}}}}"""
LISTS = ("losses", "can_answer", "fault_when", "key_entities")
MAX_CONTENT_CHARS = 60_000  # longer sources are not sent (the offline summariser takes them)


def stub_frame(kind: str, when: str | None, related: int = 0) -> tuple[str, str]:
    """The fixed start and end of a stub line: `[kind | when | ` and ` | N related]`."""
    return "[" + " | ".join([kind] + ([when] if when else [])) + " | ", (
        f" | {related} related]" if related else "]")


def prompt(content: str, kind: str, when: str | None, related: int = 0) -> list[dict]:
    full_tokens = tokens.count(content)
    head, tail = stub_frame(kind, when, related)
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT.format(
                kind=kind, full_tokens=full_tokens, content=content,
                detail_max=max(int(full_tokens * summarize.TARGET_RATIO["detail"]), 12),
                compact_max=max(int(full_tokens * summarize.TARGET_RATIO["compact"]), 12),
                stub_format=json.dumps(head + "<one-line description>" + tail, ensure_ascii=False),
                stub_example=(head + "description" + tail).replace('"', "'"))}]


def _strs(v, where: str) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise MalformedReply(f"{where} must be a list of strings")
    return list(dict.fromkeys(" ".join(x.split()) for x in v if x.strip()))


def validate(reply: dict, content: str, kind: str, when: str | None,
             related: int = 0) -> dict[str, summarize.Level]:
    """The levels of a reply, or MalformedReply naming the first rule it breaks."""
    source_entities = summarize.entities(content)
    above: summarize.Level | None = None
    above_tokens = tokens.count(content)
    head, tail = stub_frame(kind, when, related)
    levels: dict[str, summarize.Level] = {}
    said: list[str] = []  # losses the LLM declared, accumulated down the ladder
    for name in summarize.LEVELS:
        lv = reply.get(name)
        if not isinstance(lv, dict):
            raise MalformedReply(f"{name} must be an object")
        text = lv.get("summary")
        if not isinstance(text, str) or not text.strip():
            raise MalformedReply(f"{name}.summary must be a non-empty string")
        text = text.strip()
        declared = {k: _strs(lv.get(k), f"{name}.{k}") for k in LISTS}
        if name == "stub" and ("\n" in text or not text.startswith(head) or not text.endswith(tail)
                               or not text[len(head):len(text) - len(tail)].strip()):
            raise MalformedReply(f"stub {text[:80]!r} is not one line {head}…{tail}")
        n = tokens.count(text)
        if n > above_tokens:
            raise MalformedReply(f"{name} has {n} tokens, more than the {above_tokens} above it")
        for e in declared["key_entities"]:
            if not summarize._present(e, text):
                raise MalformedReply(f"{name}: key entity {e[:60]!r} is not in the text")
        for e in declared["losses"]:
            if summarize._present(e, text):
                raise MalformedReply(f"{name}: declared loss {e[:60]!r} is in the text")
        level = summarize.Level(text=text, tokens=n)
        # The LLM's declared losses (this level's and those above) come first: the list
        # is capped, and they say more than the identifiers computed as absent.
        said = list(dict.fromkeys([e for e in said if not summarize._present(e, text)] + declared["losses"]))
        inherited = [e for e in (above.dropped if above else []) if not summarize._present(e, text)]
        absent = [e for e in source_entities if not summarize._present(e, text)]
        dropped = list(dict.fromkeys(said + inherited + absent))
        level.dropped, level.dropped_count = dropped[:summarize.MAX_DECLARED], len(dropped)
        kept = declared["key_entities"] + [e for e in source_entities if summarize._present(e, text)]
        level.key_entities = list(dict.fromkeys(kept))[:summarize.MAX_DECLARED]
        level.can_answer = declared["can_answer"]
        level.fault_when = list(dict.fromkeys((above.fault_when if above else []) + declared["fault_when"]))
        levels[name] = level
        above, above_tokens = level, n
    return levels


def summarize_llm(config: dict, api_key: str | None, content: str, kind: str = "note",
                  when: str | None = None, related: int = 0,
                  sleep=time.sleep) -> tuple[dict[str, summarize.Level], int]:
    """(levels, attempts) from the helper LLM; raises HelperLLMError (retries spent)."""
    if len(content) > MAX_CONTENT_CHARS:
        raise helper_llm.HelperLLMError(f"content over {MAX_CONTENT_CHARS} characters: not sent",
                                        errors=["too long"])
    return helper_llm.chat_json(config, api_key, prompt(content, kind, when, related),
                                lambda r: validate(r, content, kind, when, related), sleep)
