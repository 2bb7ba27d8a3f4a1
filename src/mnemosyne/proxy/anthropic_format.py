"""Anthropic Messages <-> OpenAI chat messages, exactly both ways.

Mnemosyne stores OpenAI chat messages; an Anthropic client's history is recorded in
that form and the compiled context goes back in Anthropic's. The mapping is lossless
for what a client sends (to_openai then to_anthropic gives the same messages back):
- system: a string or text blocks (cache_control kept); the proxy sends the client's
  own system field upstream and adds the memory block after it (with_memory_system).
- text blocks are OpenAI text parts as they are (cache_control, citations kept on the
  part); images become image_url parts (base64 as a data: URL, or the url), their
  other keys kept; thinking, redacted_thinking, document and any other block are kept
  as parts of their own type.
- tool_use blocks are tool calls (input as JSON arguments; cache_control kept on the
  call); tool_result blocks are tool messages, their content a string or parts. A
  tool_result's own keys without an OpenAI place (is_error, cache_control) go in a
  leading part {"type": "anthropic_tool_result", ...}, which also says whether its
  content was a string.
- one Anthropic user message holding tool results and text is several OpenAI
  messages (the tool messages, then a user message), merged back into one.
- stop reasons map to finish reasons and back (STOP_TO_FINISH, FINISH_TO_STOP).
"""

from __future__ import annotations

import json
from typing import Any

STOP_TO_FINISH = {
    "end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
    "max_tokens": "length", "model_context_window_exceeded": "length",
    "tool_use": "tool_calls", "refusal": "content_filter",
}
FINISH_TO_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                  "function_call": "tool_use", "content_filter": "refusal"}
TOOL_RESULT_META = "anthropic_tool_result"
# Where a compiled history starts with the model's turn (its beginning was cut to fit
# the window), the Messages API still wants a user turn first.
LEAD_USER_TURN = "(The earlier part of this conversation is summarized above.)"


def system_text(system: Any) -> str | None:
    """The system field as one text (the session's system prompt)."""
    if isinstance(system, str):
        return system or None
    if isinstance(system, list):
        text = "\n\n".join(b.get("text", "") for b in system if isinstance(b, dict) and b.get("type") == "text")
        return text or None
    return None


# ----------------------------------------------------------------- blocks <-> parts
def part_of(block: dict) -> dict:
    if block.get("type") == "image" and isinstance(block.get("source"), dict):
        src = block["source"]
        extras = {k: v for k, v in block.items() if k not in ("type", "source")}
        if src.get("type") == "base64":
            url = f"data:{src.get('media_type')};base64,{src.get('data')}"
        elif src.get("type") == "url":
            url = src.get("url")
        else:
            return dict(block)
        return {"type": "image_url", "image_url": {"url": url}, **extras}
    return dict(block)


def block_of(part: dict) -> dict:
    if part.get("type") == "image_url" and isinstance(part.get("image_url"), dict):
        url = part["image_url"].get("url") or ""
        extras = {k: v for k, v in part.items() if k not in ("type", "image_url")}
        if url.startswith("data:") and ";base64," in url:
            media_type, data = url[5:].split(";base64,", 1)
            source = {"type": "base64", "media_type": media_type, "data": data}
        else:
            source = {"type": "url", "url": url}
        return {"type": "image", "source": source, **extras}
    return dict(part)


def tool_call_of(block: dict) -> dict:
    extras = {k: v for k, v in block.items() if k not in ("type", "id", "name", "input")}
    return {"id": block.get("id"), "type": "function",
            "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input", {}))},
            **extras}


def tool_use_of(call: dict) -> dict:
    fn = call.get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError:
        args = {"arguments": fn.get("arguments")}
    extras = {k: v for k, v in call.items() if k not in ("id", "type", "function", "index")}
    return {"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": args, **extras}


def tool_message_of(block: dict) -> dict:
    content = block.get("content")
    extras = {k: v for k, v in block.items() if k not in ("type", "tool_use_id", "content")}
    if not extras and isinstance(content, str):
        return {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": content}
    if isinstance(content, str):
        parts, shape = [{"type": "text", "text": content}], "string"
    elif isinstance(content, list):
        parts, shape = [part_of(b) for b in content], "blocks"
    else:
        parts, shape = [], "none"
    meta = {"type": TOOL_RESULT_META, "content": shape, **extras}
    return {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": [meta, *parts]}


def tool_result_of(message: dict) -> dict:
    content = message.get("content")
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.get("tool_call_id")}
    if isinstance(content, list) and content and isinstance(content[0], dict) \
            and content[0].get("type") == TOOL_RESULT_META:
        meta, parts = content[0], content[1:]
        shape = meta.get("content")
        if shape == "string":
            out["content"] = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        elif shape == "blocks":
            out["content"] = [block_of(p) for p in parts]
        out.update({k: v for k, v in meta.items() if k not in ("type", "content")})
        return out
    if isinstance(content, list):
        out["content"] = [block_of(p) for p in content if isinstance(p, dict)]
    else:
        out["content"] = content if content is not None else ""
    return out


# ----------------------------------------------------------------- messages
def to_openai(system: Any, messages: list[dict]) -> list[dict]:
    """An Anthropic request's system and messages as OpenAI chat messages."""
    out: list[dict] = []
    text = system_text(system)
    if text:
        out.append({"role": "system", "content": text})
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if not isinstance(content, list):
            out.append({"role": role, "content": content})
            continue
        if role == "assistant":
            parts = [part_of(b) for b in content if b.get("type") != "tool_use"]
            calls = [tool_call_of(b) for b in content if b.get("type") == "tool_use"]
            msg: dict[str, Any] = {"role": "assistant", "content": parts or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        pending: list[dict] = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                if pending:
                    out.append({"role": role, "content": pending})
                    pending = []
                out.append(tool_message_of(b))
            else:
                pending.append(part_of(b) if isinstance(b, dict) else b)
        if pending:
            out.append({"role": role, "content": pending})
    return out


def _blocks(content: Any) -> list:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def to_anthropic(messages: list[dict]) -> tuple[list[str], list[dict]]:
    """OpenAI chat messages as (system texts, Anthropic messages). System and developer
    messages become system texts; tool messages join the user turn after the call;
    consecutive turns of one role are merged, and a first turn of the model's gets a
    user turn before it."""
    system: list[str] = []
    out: list[dict] = []

    def add(role: str, content: Any) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"] = _blocks(out[-1]["content"]) + _blocks(content)
        else:
            out.append({"role": role, "content": content})

    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role in ("system", "developer"):
            text = content if isinstance(content, str) else "\n".join(
                p.get("text", "") for p in content or [] if isinstance(p, dict))
            if text:
                system.append(text)
        elif role == "tool":
            add("user", [tool_result_of(m)])
        elif role == "assistant":
            calls = [tool_use_of(c) for c in m.get("tool_calls") or []]
            if isinstance(content, list):
                blocks = [block_of(p) for p in content if isinstance(p, dict)]
            else:
                blocks = _blocks(content)
            if calls:
                add("assistant", blocks + calls)
            else:
                add("assistant", [block_of(p) for p in content] if isinstance(content, list)
                    else (content or ""))
        else:
            add("user", [block_of(p) for p in content if isinstance(p, dict)]
                if isinstance(content, list) else content)
    if out and out[0]["role"] == "assistant":
        out.insert(0, {"role": "user", "content": LEAD_USER_TURN})
    return system, out


def with_memory_system(client_system: Any, extra: list[str]) -> Any:
    """The client's own system field, exactly, followed by the memory block and summary."""
    if not extra:
        return client_system
    if isinstance(client_system, list):
        return client_system + [{"type": "text", "text": t} for t in extra]
    return "\n\n".join(([client_system] if client_system else []) + extra)


def tool_definition(openai_tool: dict) -> dict:
    """An OpenAI function tool as an Anthropic tool."""
    fn = openai_tool.get("function") or {}
    return {"name": fn.get("name"), "description": fn.get("description", ""),
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}}


def limit_cache_breakpoints(body: dict, limit: int = 4) -> None:
    """Anthropic accepts at most `limit` cache_control markers. A compiled history
    carries the markers its messages had when they were recorded (a client moves its
    breakpoint every turn), so the oldest markers in the messages are removed until
    the request has `limit`; those of the system field and tools are the client's own
    current ones and stay."""
    def marked(blocks: Any) -> list[dict]:
        return [b for b in blocks if isinstance(b, dict) and "cache_control" in b] \
            if isinstance(blocks, list) else []

    fixed = len(marked(body.get("system"))) + len(marked(body.get("tools")))
    in_messages = []
    for m in body.get("messages") or []:
        content = m.get("content")
        for b in content if isinstance(content, list) else []:
            if isinstance(b, dict):
                in_messages.extend(marked([b]) + marked(b.get("content")))
    for b in in_messages[:max(fixed + len(in_messages) - limit, 0)]:
        b.pop("cache_control", None)


def reply_message(content: list[dict]) -> dict:
    """An Anthropic reply's content blocks as the OpenAI assistant message recorded."""
    return to_openai(None, [{"role": "assistant", "content": content}])[0]
