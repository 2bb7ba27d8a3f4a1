"""The model's answer on its way back to the client, for both protocols, streamed or
not: memory (phantom) tool calls are answered here and never reach the client.

When the model calls a phantom tool (the names the compile's bundle lists), the call
is held back, answered by mnemo.handle_tool_call, and the model is called again with
the call and its answer appended; the client receives only the continuation, as if
the first answer had gone on. Text the model wrote before the call has reached the
client already and stays. A client tool call in the same answer goes to the client
unchanged (its index renumbered so the client's indexes stay 0, 1, ...); the phantom
calls beside it are still answered, for their effect on memory, but the turn ends with
the client's calls. At most Config.max_phantom_rounds continuations per request; past
them the phantom calls are dropped and the turn ends.

What the client saw is accumulated as it goes: the model's reply (text, client tool
calls, usage) that the proxy records after the response has ended."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from httpx2 import EventSource

from .anthropic_format import STOP_TO_FINISH, reply_message, tool_call_of
from .memory import Memory

# one encoder for every event: json.dumps with non-default arguments builds a new one a call
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def add_usage(total: dict, usage: dict | None) -> None:
    for k, v in (usage or {}).items():
        if isinstance(v, int) and not isinstance(v, bool):
            total[k] = total.get(k, 0) + v
        elif k not in total:
            total[k] = v


@dataclass
class Exchange:
    """One managed request: who, where its reply is recorded, and how to call upstream
    again with more messages."""
    memory: Memory
    tenant: str
    session_id: uuid.UUID
    position: int
    phantom_names: set[str]
    body: dict
    send: Callable[[dict], Awaitable[httpx2.Response]]  # the upstream call (streaming response)
    max_rounds: int = 4
    started: float = field(default_factory=time.monotonic)
    reply: dict | None = None
    metadata: dict = field(default_factory=dict)
    phantom_calls: int = 0
    key: str | None = None  # the request's API key, which binds its database work

    async def answer(self, calls: list[dict]) -> list[dict]:
        """OpenAI tool messages answering phantom calls (OpenAI tool_call objects)."""
        self.phantom_calls += len(calls)
        answers = []
        for call in calls:
            a = await self.memory.handle_tool_call(self.tenant, self.session_id, call, self.key)
            content = a.get("content") if isinstance(a, dict) else a
            answers.append({"role": "tool", "tool_call_id": call.get("id"),
                            "content": content if isinstance(content, str) else _dumps(content)})
        return answers

    async def record(self) -> None:
        if self.reply is not None:
            self.metadata["latency_ms"] = int((time.monotonic() - self.started) * 1000)
            if self.phantom_calls:
                self.metadata["memory_tool_calls"] = self.phantom_calls
            await self.memory.record_reply(self.tenant, self.session_id, self.position, self.reply,
                                           {k: v for k, v in self.metadata.items() if v is not None},
                                           self.key)


def usage_metadata(usage: dict, model: str | None, finish: str | None) -> dict:
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    return {"model": model, "finish_reason": finish, "prompt_tokens": prompt,
            "completion_tokens": completion}


class UpstreamError(Exception):
    """A continuation call failed: its status and body (already provider-shaped)."""

    def __init__(self, status: int, body: bytes):
        super().__init__(f"upstream {status}")
        self.status, self.body = status, body


async def _continue(ex: Exchange) -> httpx2.Response:
    resp = await ex.send(ex.body)
    if resp.status_code >= 400:
        body = await resp.aread()
        await resp.aclose()
        raise UpstreamError(resp.status_code, body)
    return resp


async def close_upstream(resp: httpx2.Response) -> None:
    """Closes an upstream response, also while the client's disconnect cancels the
    stream: the upstream call ends with it."""
    with anyio.CancelScope(shield=True):
        await resp.aclose()


def _error_payload(body: bytes, status: int) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return {"message": body.decode("utf-8", "replace") or f"upstream status {status}"}


# =============================================================== OpenAI chat completions
class OpenAIRelay:
    def __init__(self, ex: Exchange, want_usage: bool):
        self.ex, self.want_usage = ex, want_usage
        self.first: dict | None = None
        self.usage: dict = {}
        self.text = ""
        self.refusal = ""
        self.client_calls: list[dict] = []
        self.next_index = 0
        self.finish: str | None = None
        self.error = False

    # ------------------------------------------------------------------ streaming
    async def stream(self, resp: httpx2.Response) -> AsyncIterator[bytes]:
        rounds = 0
        try:
            while True:
                self.round_text, self.calls, self.finish = "", {}, None
                async for sse in EventSource(resp):
                    if sse.data.strip() == "[DONE]":
                        break
                    chunk = json.loads(sse.data)
                    if "error" in chunk:
                        self.error = True
                        yield f"data: {_dumps(chunk)}\n\n".encode()
                        return
                    out = self._chunk(chunk, rounds)
                    if out is chunk and "\n" not in sse.data:
                        # nothing of it changes: the provider's own line, not encoded again
                        # (most of a streamed answer: ~100 text deltas at 50 tokens/s)
                        yield f"data: {sse.data}\n\n".encode()
                    elif out is not None:
                        yield f"data: {_dumps(out)}\n\n".encode()
                await resp.aclose()
                phantom = [c for c in self.calls.values() if c["phantom"]]
                client = [c for c in self.calls.values() if c["phantom"] is False]
                if phantom:
                    answers = await self.ex.answer([self._call(c) for c in phantom])
                    if not client and rounds < self.ex.max_rounds:
                        self.ex.body["messages"] = self.ex.body["messages"] + [
                            {"role": "assistant", "content": self.round_text or None,
                             "tool_calls": [self._call(c) for c in phantom]}, *answers]
                        try:
                            resp = await _continue(self.ex)
                        except UpstreamError as e:
                            yield f"data: {_dumps(_error_payload(e.body, e.status))}\n\n".encode()
                            return
                        rounds += 1
                        continue
                for c in client:
                    self.client_calls.append(self._call(c))
                break
            for piece in self._final():
                yield piece
        except httpx2.HTTPError as e:  # the upstream failed midway: say so in the stream
            yield f"data: {_dumps({'error': {'message': f'upstream failed: {e}', 'type': 'server_error'}})}\n\n".encode()
        finally:
            await close_upstream(resp)

    def _chunk(self, chunk: dict, rounds: int) -> dict | None:
        """What the client gets of an upstream chunk: None (nothing), the chunk itself
        when it goes on unchanged, or a new chunk."""
        if self.first is None:
            self.first = {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint")}
        same = chunk.get("id") == self.first["id"] and "usage" not in chunk
        chunk["id"] = self.first["id"]
        add_usage(self.usage, chunk.pop("usage", None))
        choices = chunk.get("choices") or []
        if not choices:
            return None
        choice = choices[0]
        delta = choice.get("delta") or {}
        out: dict[str, Any] = {}
        for k, v in delta.items():
            if k == "role":
                if rounds == 0:
                    out[k] = v
            elif k == "content":
                if v:
                    self.text += v
                    self.round_text += v
                    out[k] = v
                elif rounds == 0 and v == "":
                    out[k] = v
            elif k == "tool_calls":
                forwarded = self._tool_deltas(v or [])
                if forwarded:
                    out[k] = forwarded
            else:
                if k == "refusal" and v:
                    self.refusal += v
                out[k] = v
        if choice.get("finish_reason"):
            self.finish = choice["finish_reason"]
        if not out:
            return None
        if same and len(choices) == 1 and "finish_reason" in choice and choice["finish_reason"] is None \
                and "tool_calls" not in delta and len(out) == len(delta):  # each key copied as it was
            return chunk
        return {**chunk, "choices": [{**choice, "delta": out, "finish_reason": None}]}

    def _tool_deltas(self, deltas: list[dict]) -> list[dict]:
        out = []
        for d in deltas:
            st = self.calls.setdefault(d.get("index", 0), {
                "id": None, "name": "", "args": "", "phantom": None, "index": None, "pending": []})
            fn = d.get("function") or {}
            st["id"] = d.get("id") or st["id"]
            st["name"] += fn.get("name") or ""
            st["args"] += fn.get("arguments") or ""
            if st["phantom"] is None and st["name"]:
                st["phantom"] = st["name"] in self.ex.phantom_names
                if not st["phantom"]:
                    st["index"], self.next_index = self.next_index, self.next_index + 1
            if st["phantom"] is None:
                st["pending"].append(d)
            elif not st["phantom"]:
                out.extend({**p, "index": st["index"]} for p in [*st["pending"], d])
                st["pending"] = []
        return out

    @staticmethod
    def _call(st: dict) -> dict:
        return {"id": st["id"], "type": "function", "function": {"name": st["name"], "arguments": st["args"]}}

    def _finish_reason(self) -> str | None:
        if self.client_calls:
            return "tool_calls"
        return "stop" if self.finish == "tool_calls" else self.finish

    def _final(self) -> list[bytes]:
        first = self.first or {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()),
                               "model": self.ex.body.get("model")}
        finish = self._finish_reason()
        head = {k: v for k, v in first.items() if v is not None}
        out = [{**head, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]
        if self.want_usage and self.usage:
            out.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": self.usage})
        self._keep_reply(finish, first.get("model"))
        return [f"data: {_dumps(c)}\n\n".encode() for c in out] + [b"data: [DONE]\n\n"]

    def _keep_reply(self, finish: str | None, model: str | None) -> None:
        reply: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.client_calls:
            reply["tool_calls"] = self.client_calls
        if self.refusal:
            reply["refusal"] = self.refusal
        self.ex.reply = reply
        self.ex.metadata = usage_metadata(self.usage, model, finish)

    # ------------------------------------------------------------------ whole answers
    async def complete(self, data: dict) -> dict:
        """A non-streamed answer, after any phantom rounds (raises UpstreamError)."""
        first = data
        rounds = 0
        while True:
            add_usage(self.usage, data.get("usage"))
            choice = (data.get("choices") or [{}])[0]
            msg = choice.get("message") or {}
            calls = msg.get("tool_calls") or []
            phantom = [c for c in calls if (c.get("function") or {}).get("name") in self.ex.phantom_names]
            client = [c for c in calls if c not in phantom]
            self.text += msg.get("content") or ""
            self.refusal += msg.get("refusal") or ""
            self.finish = choice.get("finish_reason")
            if phantom:
                answers = await self.ex.answer(phantom)
                if not client and rounds < self.ex.max_rounds:
                    self.ex.body["messages"] = self.ex.body["messages"] + [
                        {"role": "assistant", "content": msg.get("content"), "tool_calls": phantom}, *answers]
                    resp = await _continue(self.ex)
                    data = json.loads(await resp.aread())
                    await resp.aclose()
                    rounds += 1
                    continue
            self.client_calls = client
            break
        finish = self._finish_reason()
        message = {**msg, "content": self.text or (None if self.client_calls else msg.get("content"))}
        if self.client_calls:
            message["tool_calls"] = self.client_calls
        else:
            message.pop("tool_calls", None)
        out = {**first, "choices": [{**(first.get("choices") or [{}])[0], "message": message,
                                      "finish_reason": finish}]}
        if self.usage:
            out["usage"] = self.usage
        self._keep_reply(finish, first.get("model"))
        return out


# =============================================================== Anthropic messages
class AnthropicRelay:
    def __init__(self, ex: Exchange):
        self.ex = ex
        self.message: dict | None = None
        self.usage: dict = {}
        self.visible: list[dict] = []  # the client's content blocks, every round
        self.next_index = 0
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None

    @staticmethod
    def _event(kind: str, data: dict) -> bytes:
        return f"event: {kind}\ndata: {_dumps(data)}\n\n".encode()

    async def stream(self, resp: httpx2.Response) -> AsyncIterator[bytes]:
        rounds = 0
        try:
            while True:
                self.blocks: dict[int, dict] = {}
                self.stop_reason = None
                async for sse in EventSource(resp):
                    data = json.loads(sse.data) if sse.data else {}
                    kind = data.get("type") or sse.event
                    if kind == "error":
                        yield self._event("error", data)
                        return
                    out = self._handle(kind, data, rounds)
                    if out is data and sse.event == kind and "\n" not in sse.data:
                        # nothing of it changes: the provider's own lines, not encoded again
                        yield f"event: {kind}\ndata: {sse.data}\n\n".encode()
                    elif out is not None:
                        yield self._event(kind, out)
                    if kind == "message_stop":
                        break
                await resp.aclose()
                round_blocks = [self.blocks[i]["block"] for i in sorted(self.blocks)]
                phantom = [b for b in round_blocks if self._is_phantom(b)]
                client = [b for b in round_blocks if b.get("type") == "tool_use" and not self._is_phantom(b)]
                if phantom:
                    answers = await self.ex.answer([tool_call_of(b) for b in phantom])
                    if not client and rounds < self.ex.max_rounds:
                        self._append_round(round_blocks, answers)
                        try:
                            resp = await _continue(self.ex)
                        except UpstreamError as e:
                            yield self._event("error", _error_payload(e.body, e.status))
                            return
                        rounds += 1
                        continue
                break
            stop = self._final_stop()
            yield self._event("message_delta", {
                "type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": self.stop_sequence},
                "usage": {k: v for k, v in self.usage.items() if isinstance(v, int)}})
            yield self._event("message_stop", {"type": "message_stop"})
            self._keep_reply(stop)
        except httpx2.HTTPError as e:  # the upstream failed midway: say so in the stream
            yield self._event("error", {"type": "error", "error": {"type": "api_error",
                                                                   "message": f"upstream failed: {e}"}})
        finally:
            await close_upstream(resp)

    def _is_phantom(self, block: dict) -> bool:
        return block.get("type") == "tool_use" and block.get("name") in self.ex.phantom_names

    def _append_round(self, blocks: list[dict], answers: list[dict]) -> None:
        results = [{"type": "tool_result", "tool_use_id": a["tool_call_id"], "content": a["content"]}
                   for a in answers]
        self.ex.body["messages"] = self.ex.body["messages"] + [
            {"role": "assistant", "content": blocks}, {"role": "user", "content": results}]

    def _handle(self, kind: str, data: dict, rounds: int) -> dict | None:
        if kind == "message_start":
            msg = data.get("message") or {}
            # output_tokens: message_delta's count covers the whole message
            add_usage(self.usage, {k: v for k, v in (msg.get("usage") or {}).items() if k != "output_tokens"})
            if rounds == 0:
                self.message = msg
                return data
            return None
        if kind == "content_block_start":
            block = dict(data.get("content_block") or {})
            st = {"block": block, "json": "", "phantom": self._is_phantom(block), "index": None}
            self.blocks[data.get("index", 0)] = st
            if st["phantom"]:
                return None
            st["index"], self.next_index = self.next_index, self.next_index + 1
            return {**data, "index": st["index"]}
        if kind == "content_block_delta":
            st = self.blocks.get(data.get("index", 0))
            if st is None:
                return None
            self._accumulate(st, data.get("delta") or {})
            if st["phantom"]:
                return None
            return data if data.get("index", -1) == st["index"] else {**data, "index": st["index"]}
        if kind == "content_block_stop":
            st = self.blocks.get(data.get("index", 0))
            if st is None:
                return None
            if st["block"].get("type") in ("tool_use", "server_tool_use") and st["json"]:
                try:
                    st["block"]["input"] = json.loads(st["json"])
                except ValueError:
                    st["block"]["input"] = {}
            if st["phantom"]:
                return None
            self.visible.append(st["block"])
            return {**data, "index": st["index"]}
        if kind == "message_delta":
            delta = data.get("delta") or {}
            self.stop_reason = delta.get("stop_reason")
            self.stop_sequence = delta.get("stop_sequence")
            usage = data.get("usage") or {}
            add_usage(self.usage, {"output_tokens": usage.get("output_tokens", 0)})
            return None
        if kind == "message_stop":
            return None
        return data  # ping, and events this relay does not know

    @staticmethod
    def _accumulate(st: dict, delta: dict) -> None:
        block, kind = st["block"], delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
        elif kind == "input_json_delta":
            st["json"] += delta.get("partial_json", "")
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))

    def _final_stop(self) -> str | None:
        if any(b.get("type") == "tool_use" for b in self.visible):
            return "tool_use"
        return "end_turn" if self.stop_reason == "tool_use" else self.stop_reason

    def _keep_reply(self, stop: str | None) -> None:
        blocks = [{k: v for k, v in b.items() if v is not None} for b in self.visible]
        if blocks:
            self.ex.reply = reply_message(blocks)
        self.ex.metadata = {**usage_metadata(self.usage, (self.message or {}).get("model"),
                                             STOP_TO_FINISH.get(stop or "", stop)),
                            "stop_reason": stop}

    async def complete(self, data: dict) -> dict:
        first = data
        rounds = 0
        while True:
            add_usage(self.usage, data.get("usage"))
            blocks = data.get("content") or []
            phantom = [b for b in blocks if self._is_phantom(b)]
            client = [b for b in blocks if b.get("type") == "tool_use" and not self._is_phantom(b)]
            self.visible.extend(b for b in blocks if not self._is_phantom(b))
            self.stop_reason, self.stop_sequence = data.get("stop_reason"), data.get("stop_sequence")
            if phantom:
                answers = await self.ex.answer([tool_call_of(b) for b in phantom])
                if not client and rounds < self.ex.max_rounds:
                    self._append_round(blocks, answers)
                    resp = await _continue(self.ex)
                    data = json.loads(await resp.aread())
                    await resp.aclose()
                    rounds += 1
                    continue
            break
        self.message = first
        stop = self._final_stop()
        self._keep_reply(stop)
        return {**first, "content": self.visible, "stop_reason": stop, "stop_sequence": self.stop_sequence,
                "usage": self.usage}
