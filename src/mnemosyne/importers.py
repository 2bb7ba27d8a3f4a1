"""Readers for the conversation files `mnemo import` takes, and the import itself.

Every reader turns its file into :class:`Parsed`: sessions (each with a stable id and
its messages in OpenAI's chat shape) and explicit memories. :func:`run_import` writes
them through the SQL API only (create_tenant, start_session, record_messages,
remember). It is idempotent and resumable: a session's id is derived from what
identifies it in the file (its own id where the format has one, else a hash of its
content), and a session that exists already gets only the messages after the ones
it holds, so an import that was interrupted goes on where it stopped, and one that
finished changes nothing when run again.

Formats (``detect`` picks one from the file's name and first bytes):

- ``mnemosyne``: what `mnemo export` writes (:func:`mnemo.export_tenant`'s lines).
- ``openai``: JSONL of OpenAI chat messages, either one message per line (the file
  is one session) or one ``{"messages": [...], "session_id"?: uuid}`` per line (a
  session per line).
- ``claude-code``: a Claude Code session log (``~/.claude/projects/*/<id>.jsonl``):
  user and assistant entries with Anthropic content blocks; tool_use / tool_result
  blocks become tool calls and tool messages, the blocks of one assistant reply
  (logged one per line) are joined, thinking blocks and side chains are left out.
- ``swe-agent``: a SWE-agent ``.traj`` file (its ``history``).
- ``locomo``: the LoCoMo benchmark's JSON (every session of every conversation).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

# Session ids of imported sessions: uuid5 in this namespace of the format and the key.
NAMESPACE = uuid.UUID("5d1c7c36-64d8-4b8e-9a51-0a7a3c8f2e11")
FORMATS = ("mnemosyne", "openai", "claude-code", "swe-agent", "locomo")
MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "refusal")


@dataclass
class Session:
    session_id: uuid.UUID
    params: dict[str, Any] = field(default_factory=dict)  # start_session's keyword arguments
    messages: list[dict[str, Any]] = field(default_factory=list)  # record_message's arguments


@dataclass
class Parsed:
    format: str
    sessions: list[Session]
    memories: list[dict[str, Any]] = field(default_factory=list)  # remember's arguments
    tenant: dict[str, Any] | None = None  # the export's tenant line

    @property
    def message_count(self) -> int:
        return sum(len(s.messages) for s in self.sessions)


class ImportFormatError(ValueError):
    """The file is not in the format it was read as (or in none)."""


def derived_id(fmt: str, key: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"{fmt}:{key}")


def content_key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _entry(message: dict, created_at: Any = None, metadata: dict | None = None, **kw: Any) -> dict:
    out = {"message": message, "created_at": _when(created_at), "metadata": metadata or {}}
    out.update({k: v for k, v in kw.items() if v is not None})
    return out


def _when(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _text_of(content: Any) -> str:
    """The text of a string or of a list of content blocks (images as a marker)."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, str):
            parts.append(block)
        elif block.get("type") == "text":
            parts.append(block.get("text", ""))
        elif block.get("type") in ("image", "image_url"):
            parts.append("[image]")
    return "\n".join(parts)


# ----------------------------------------------------------------------- detection
def detect(path: Path) -> str:
    """The format of a file, from its name and its first line or bytes."""
    if path.suffix == ".traj":
        return "swe-agent"
    with path.open("rb") as f:
        head = f.read(1 << 16).lstrip()
        if head[:1] == b"[" and b'"conversation"' in head:
            return "locomo"
        if head[:1] == b"{" and path.suffix == ".json" and b'"history"' in head:
            return "swe-agent"
        # the whole first line: a session per line can be longer than the head
        f.seek(0)
        first_line = next((line for line in f if line.strip()), b"")
    try:
        first = json.loads(first_line)
    except json.JSONDecodeError:
        first = None
    if isinstance(first, dict):
        if first.get("format") == "mnemosyne.export":
            return "mnemosyne"
        if "sessionId" in first or first.get("type") in ("summary", "file-history-snapshot"):
            return "claude-code"
        if "role" in first or "messages" in first:
            return "openai"
    raise ImportFormatError(
        f"cannot tell the format of {path}", )


def read(path: Path, fmt: str | None = None) -> Parsed:
    try:
        return _read(path, fmt)
    except UnicodeDecodeError as e:
        raise ImportFormatError(f"{path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                                f"{e.start} of a line or block); nothing was imported") from e


def _read(path: Path, fmt: str | None) -> Parsed:
    fmt = fmt or detect(path)
    readers: dict[str, Callable[[Path], Parsed]] = {
        "mnemosyne": read_export, "openai": read_openai, "claude-code": read_claude_code,
        "swe-agent": read_swe_agent, "locomo": read_locomo}
    if fmt not in readers:
        raise ImportFormatError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    try:
        parsed = readers[fmt](path)
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise ImportFormatError(f"{path} is not a valid {fmt} file: {type(e).__name__}: {e}") from e
    for session in parsed.sessions:
        unique_tool_call_ids(session)
    return parsed


def unique_tool_call_ids(session: Session) -> None:
    """Recorded agents reuse tool call ids (SWE-agent's replays issue the same id
    again later in a session), which record_message refuses (MN012): a reused id
    becomes '<id>~<n>', and the tool results after it answer the renamed call."""
    issued: dict[str, int] = {}
    current: dict[str, str] = {}
    for entry in session.messages:
        m = entry["message"]
        for call in m.get("tool_calls") or []:
            cid = call.get("id")
            n = issued.get(cid, 0)
            issued[cid] = n + 1
            current[cid] = cid if n == 0 else f"{cid}~{n}"
            call["id"] = current[cid]
        if m.get("role") == "tool" and m.get("tool_call_id") in current:
            m["tool_call_id"] = current[m["tool_call_id"]]


def _json_lines(path: Path) -> Iterable[tuple[int, Any]]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield n, json.loads(line)
                except json.JSONDecodeError as e:
                    raise ImportFormatError(f"{path}:{n}: not JSON ({e.msg})") from e


# ----------------------------------------------------------------------- readers
def read_export(path: Path) -> Parsed:
    out = Parsed("mnemosyne", [])
    by_id: dict[str, Session] = {}
    for _, row in _json_lines(path):
        kind = row.get("type")
        if kind == "tenant":
            out.tenant = row
        elif kind == "session":
            params = {k: row.get(k) for k in ("agent_id", "channel", "model", "context_window",
                                              "response_reserve", "system_prompt", "config",
                                              "parent_session_id", "metadata")}
            params["started_at"] = _when(row.get("started_at"))
            s = by_id[row["session_id"]] = Session(uuid.UUID(row["session_id"]), params)
            out.sessions.append(s)
        elif kind == "message":
            by_id[row["session_id"]].messages.append(_entry(
                row["message"], row.get("created_at"), row.get("metadata"),
                sensitivity=row.get("sensitivity"), tags=row.get("tags")))
        elif kind == "memory":
            out.memories.append({"content": row["content"], "kind": row["kind"],
                                 "session_id": row.get("session_id"), "options": row.get("options") or {}})
    return out


def _openai_session(messages: list[dict], key: str | None, metadata: dict | None = None) -> Session:
    msgs = [{k: m[k] for k in MESSAGE_KEYS if k in m} for m in messages]
    params: dict[str, Any] = {"agent_id": "import", "metadata": metadata or {}}
    if msgs and msgs[0].get("role") == "system" and isinstance(msgs[0].get("content"), str):
        params["system_prompt"] = msgs.pop(0)["content"]
    try:
        sid = uuid.UUID(str(key)) if key else derived_id("openai", content_key(messages))
    except ValueError:
        sid = derived_id("openai", str(key))
    return Session(sid, params, [_entry(m) for m in msgs])


def read_openai(path: Path) -> Parsed:
    sessions, loose = [], []
    for n, row in _json_lines(path):
        if "messages" in row:
            sessions.append(_openai_session(row["messages"], row.get("session_id") or row.get("id"),
                                            row.get("metadata")))
        elif "role" in row:
            loose.append(row)
        else:
            raise ImportFormatError(f"{path}:{n}: neither a message nor a {{\"messages\": [...]}} line")
    if loose:
        sessions.insert(0, _openai_session(loose, None))
    return Parsed("openai", sessions)


def read_swe_agent(path: Path) -> Parsed:
    data = json.loads(path.read_text(encoding="utf-8"))
    history = data["history"]
    msgs = []
    for h in history:
        m: dict[str, Any] = {"role": h["role"], "content": _text_of(h.get("content"))}
        if h.get("tool_calls"):
            m["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"] if isinstance(c["function"]["arguments"], str)
                else json.dumps(c["function"]["arguments"])}} for c in h["tool_calls"]]
        if h["role"] == "tool":
            m["tool_call_id"] = (h.get("tool_call_ids") or [h.get("tool_call_id")])[0]
        msgs.append(m)
    s = _openai_session(msgs, None, {"source": "swe-agent"})
    s.session_id = derived_id("swe-agent", content_key(history))
    s.params["agent_id"] = "swe-agent"
    for e, h in zip(s.messages, history[len(history) - len(s.messages):], strict=True):
        e["metadata"] = {k: h[k] for k in ("agent", "message_type", "is_demo") if k in h}
    return Parsed("swe-agent", [s])


def read_claude_code(path: Path) -> Parsed:
    sessions: dict[str, Session] = {}
    pending: dict[str, Any] = {}  # the assistant reply being joined: {"id", "entry"}

    def flush(session: Session) -> None:
        entry = pending.pop("entry", None)
        pending.pop("id", None)
        if entry and (entry["message"]["content"] or entry["message"].get("tool_calls")):
            if not entry["message"]["content"]:
                entry["message"]["content"] = None
            session.messages.append(entry)

    for _, row in _json_lines(path):
        if row.get("type") not in ("user", "assistant") or row.get("isSidechain"):
            continue
        sid = row["sessionId"]
        session = sessions.get(sid)
        if session is None:
            session = sessions[sid] = Session(uuid.UUID(sid), {
                "agent_id": "claude-code", "context_window": 200000,
                "metadata": {"source": "claude-code", "cwd": row.get("cwd")}})
        msg = row["message"]
        meta = {"uuid": row.get("uuid")}
        if row["type"] == "assistant":
            if pending.get("id") != msg.get("id"):
                flush(session)
                pending["id"] = msg.get("id")
                session.params.setdefault("model", msg.get("model") or "claude")
                pending["entry"] = _entry({"role": "assistant", "content": ""}, row.get("timestamp"), meta)
            entry = pending["entry"]
            for block in msg.get("content") or []:
                if block.get("type") == "text" and block.get("text"):
                    c = entry["message"]["content"]
                    entry["message"]["content"] = f"{c}\n\n{block['text']}" if c else block["text"]
                elif block.get("type") == "tool_use":
                    entry["message"].setdefault("tool_calls", []).append({
                        "id": block["id"], "type": "function", "function": {
                            "name": block["name"], "arguments": json.dumps(block.get("input") or {})}})
            usage = msg.get("usage") or {}
            if isinstance(usage.get("input_tokens"), int) and isinstance(usage.get("output_tokens"), int):
                entry["metadata"].update(prompt_tokens=usage["input_tokens"],
                                         completion_tokens=usage["output_tokens"])
            continue
        flush(session)
        content = msg.get("content")
        if isinstance(content, str):
            session.messages.append(_entry({"role": "user", "content": content}, row.get("timestamp"), meta))
            continue
        text = [b for b in content or [] if b.get("type") != "tool_result"]
        for block in content or []:
            if block.get("type") == "tool_result":
                session.messages.append(_entry(
                    {"role": "tool", "tool_call_id": block["tool_use_id"],
                     "content": _text_of(block.get("content"))},
                    row.get("timestamp"), {**meta, **({"is_error": True} if block.get("is_error") else {})}))
        if _text_of(text):
            session.messages.append(_entry({"role": "user", "content": _text_of(text)},
                                           row.get("timestamp"), meta))
    for session in sessions.values():
        flush(session)
    return Parsed("claude-code", list(sessions.values()))


def locomo_turn_text(turn: dict) -> str:
    """A LoCoMo turn's text, with the caption of the image it shares."""
    text = turn["text"]
    if turn.get("blip_caption"):
        text += f" [shares {turn['blip_caption']}]"
    return text


def locomo_sessions(conversation: dict) -> list[tuple[int, datetime, list[dict]]]:
    """(number, start time, turns) of each session of a LoCoMo conversation, in order."""
    keys = sorted((k for k in conversation if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:]))
    return [(int(k[8:]), datetime.strptime(conversation[f"{k}_date_time"].strip(), "%I:%M %p on %d %B, %Y"),
             conversation[k]) for k in keys]


def locomo_message(conversation: dict, turn: dict) -> dict:
    """A LoCoMo turn as a chat message: the first speaker is the user, named."""
    role = "user" if turn["speaker"] == conversation["speaker_a"] else "assistant"
    name = re.sub(r"[^A-Za-z0-9_-]", "_", turn["speaker"])[:64]
    return {"role": role, "name": name, "content": locomo_turn_text(turn)}


def read_locomo(path: Path) -> Parsed:
    out = Parsed("locomo", [])
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        for number, when, turns in locomo_sessions(conv):
            sid = derived_id("locomo", f"{sample['sample_id']}:{number}")
            s = Session(sid, {"agent_id": "locomo", "started_at": when, "metadata": {
                "source": "locomo", "sample_id": sample["sample_id"], "session": number}})
            s.messages = [_entry(locomo_message(conv, t), when + timedelta(seconds=30 * i),
                                 {"dia_id": t["dia_id"]}) for i, t in enumerate(turns)]
            out.sessions.append(s)
    return out


# ----------------------------------------------------------------------- the import
@dataclass
class Summary:
    format: str
    tenant: str
    sessions_new: int = 0
    sessions_resumed: int = 0
    sessions_complete: int = 0
    messages_recorded: int = 0
    messages_skipped: int = 0
    memories: int = 0


BATCH = 100  # messages per transaction: a failure keeps the batches before it, never a part of one


class ImportStopped(Exception):
    """An import that met an error: what it kept, and the error."""

    def __init__(self, summary: Summary, session: uuid.UUID, kept: int, error: Exception):
        super().__init__(str(error))
        self.summary, self.session, self.kept, self.error = summary, session, kept, error


def same_labels(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive entries cut into runs that share a sensitivity and tags (what one
    mnemo.record_messages call gives all its messages)."""
    runs: list[list[dict[str, Any]]] = []
    for e in entries:
        label = (e.get("sensitivity", "none"), e.get("tags") or [])
        if runs and (runs[-1][0].get("sensitivity", "none"), runs[-1][0].get("tags") or []) == label:
            runs[-1].append(e)
        else:
            runs.append([e])
    return runs


def run_import(client: Any, tenant: str, parsed: Parsed,
               progress: Callable[[int], None] | None = None, create_tenant: bool = False) -> Summary:
    """Writes a parsed file into a tenant through a sync Client (its connection's
    transactions hold each batch); progress(n) after every n messages written
    or skipped. The tenant must exist unless create_tenant (UnknownTenant otherwise).
    Each session is written in transactions of BATCH messages, the session itself with
    its first batch, a batch in one mnemo.record_messages call (one per run of messages
    that share a sensitivity and tags): an error (a bad message) leaves nothing of the batch it is in, and
    no session without its messages; it raises ImportStopped, which says what was
    kept. A second run goes on after what was kept."""
    summary = Summary(parsed.format, tenant)
    header = parsed.tenant or {}
    if create_tenant:
        client.create_tenant(tenant, header.get("display_name"), header.get("config") or {})
    else:
        client.list_sessions(tenant, limit=1)  # UnknownTenant when there is none
    for s in parsed.sessions:
        held = client.list_sessions(tenant, session_id=s.session_id)
        done = held[0]["messages"] if held else 0
        if held and done >= len(s.messages):
            summary.sessions_complete += 1
        elif held:
            summary.sessions_resumed += 1
        summary.messages_skipped += min(done, len(s.messages))
        if progress and done:
            progress(min(done, len(s.messages)))
        start = done
        while not held or start < len(s.messages):
            batch = s.messages[start:start + BATCH]
            try:
                with client.conn.transaction():
                    if not held:
                        params = {k: v for k, v in s.params.items() if v is not None}
                        # a conversation from the past keeps its time: its first message's,
                        # unless the file says when the session started (an export: None
                        # for a live one)
                        if "started_at" not in s.params and s.messages and s.messages[0].get("created_at"):
                            params["started_at"] = s.messages[0]["created_at"]
                        client.start_session(tenant, session_id=s.session_id, **params)
                    for run in same_labels(batch):  # one call per run of the same sensitivity and tags
                        client.record_messages(tenant, s.session_id, [e["message"] for e in run],
                                               sensitivity=run[0].get("sensitivity", "none"), tags=run[0].get("tags"),
                                               created_at=[e.get("created_at") for e in run],
                                               metadata=[e.get("metadata") or {} for e in run])
            except Exception as e:
                raise ImportStopped(summary, s.session_id, start - done if held else 0, e) from e
            if not held:
                summary.sessions_new += 1
                held = [{"messages": 0}]
            summary.messages_recorded += len(batch)
            start += len(batch)
            if progress:
                progress(len(batch))
    for m in parsed.memories:
        client.remember(tenant, m["content"], kind=m["kind"], session_id=m.get("session_id"),
                        options=m.get("options"))
        summary.memories += 1
    return summary
