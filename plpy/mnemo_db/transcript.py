"""The client's view of a session, for the transparent proxy (mnemo.sync_messages).

A client of the proxy resends its whole history on every call. What it sends is
compared message by message with what was recorded before, by a hash of each message
as the client sends it (its wire form), so that only what is new is recorded. The
hash keeps what a message says and drops what a client rewrites between two calls of
the same conversation without changing it: Anthropic's cache_control markers (a
client moves its cache breakpoint every turn), thinking blocks (earlier turns' may be
left out), the text-part-versus-string spelling of the same text, empty text, and the
whitespace and key order of tool-call arguments (a client may parse and re-serialize
them)."""

from __future__ import annotations

import hashlib
import json

_DROPPED_PARTS = {"thinking", "redacted_thinking"}


def _parts(content: object) -> list:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        return []
    out = []
    for part in content:
        if not isinstance(part, dict):
            out.append(part)
        elif part.get("type") == "text":
            if part.get("text"):
                out.append({"type": "text", "text": part.get("text")})
        elif not isinstance(part.get("type"), str) or part["type"] not in _DROPPED_PARTS:  # any JSON as a type
            out.append({k: v for k, v in part.items() if k != "cache_control"})
    return out


def _arguments(arguments: object, parse: bool = True) -> object:
    if isinstance(arguments, str) and parse:
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):  # any string is stored, JSON nested past the limit too
            return arguments
    return arguments


def _calls(calls: object, parse: bool = True) -> list:
    if not isinstance(calls, list):
        return []
    out = []
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        out.append([c.get("id") if isinstance(c, dict) else c, fn.get("name"),
                    _arguments(fn.get("arguments"), parse)])
    return out


def wire_form(message: object, parse: bool = True) -> list:
    """What the hash covers: role, content parts, tool calls, tool_call_id.
    parse: tool-call arguments compared as the JSON they hold (else as sent)."""
    if not isinstance(message, dict):
        return [None, message]
    return [message.get("role"), _parts(message.get("content")), _calls(message.get("tool_calls"), parse),
            message.get("tool_call_id")]


def wire_hash(message: object) -> bytes:
    try:
        text = json.dumps(wire_form(message), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:  # arguments that parse but nest too deep to write back: as sent
        text = json.dumps(wire_form(message, parse=False), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


def wire_hashes(messages_json: str) -> list[bytes]:
    """The hash of each message of a JSON array, in order."""
    messages = json.loads(messages_json)
    return [wire_hash(m) for m in messages] if isinstance(messages, list) else []
