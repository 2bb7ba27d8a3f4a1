"""Token counting with OpenAI's o200k_base encoding (GPT-4o, GPT-4.1, o-series, GPT-5).

quicktok produces token ids byte-identical to tiktoken (checked against tiktoken's
cl100k_base on every LoCoMo turn), ships its vocabularies in the wheel (tiktoken
downloads them at first use, which a database server must not depend on) and counts
~6x faster. Counts are computed once, at write time, and stored with each row.
"""

from __future__ import annotations

import json

ENCODING = "o200k_base"
# Per-message framing overhead of the chat format (role, separators), as in OpenAI's
# token-counting guide: 3 tokens per message, +1 when a name is given.
MESSAGE_OVERHEAD = 3
NAME_OVERHEAD = 1
# A non-text content part (image, audio, file) is charged a flat amount: the real
# cost depends on the provider and detail level, which are unknown at write time.
NON_TEXT_PART_TOKENS = 85

_enc = None


def encoding():
    global _enc
    if _enc is None:
        import quicktok

        _enc = quicktok.get_encoding(ENCODING)
    return _enc


def count(text: str | None) -> int:
    if not text:
        return 0
    return encoding().count(text)


def count_line_text(text: str) -> int:
    """Tokens of the text part of a memory-block line (compile.packing.full_line): the space
    after the item's label, the text and the newline. A line is
    f"{label} {text}\n" with a label ending in "]" (compile.packing.item_label), and o200k's
    pre-tokenizer always splits between that "]" and the space (no pattern takes a
    space after punctuation), so the line costs count(label) + count_line_text(text)
    exactly. The text part is counted once, when a row is written (the line_tokens
    columns, mnemo_internal.line_tokens), instead of at every compile."""
    return count(f" {text}\n")


def content_text(content) -> str:
    """The text of an OpenAI message content: a string or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(
        p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
    )


def count_message(message: dict) -> int:
    """Tokens an OpenAI chat message costs in a prompt."""
    content = message.get("content")
    n = MESSAGE_OVERHEAD + count(content_text(content))
    if isinstance(content, list):
        n += NON_TEXT_PART_TOKENS * sum(
            1 for p in content if isinstance(p, dict) and p.get("type") != "text"
        )
    if message.get("name"):
        n += NAME_OVERHEAD + count(message["name"])
    if message.get("tool_calls"):
        n += count(json.dumps(message["tool_calls"], separators=(",", ":")))
    if message.get("tool_call_id"):
        n += count(message["tool_call_id"])
    return n
