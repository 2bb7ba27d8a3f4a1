"""A scripted provider: a real HTTP server that speaks OpenAI chat completions and
Anthropic messages, streamed (SSE) or not, from a script of replies. The proxy's tests
and its benchmark run against it, and `python -m mnemosyne.proxy.scripted --port N`
serves it alone (each request then gets the default reply).

Each request takes the next Reply of the script (or the default): its text, tool
calls, thinking, status (an error status sends a provider-shaped error body), the
wait before the first streamed piece (a model's time to its first token) and the
delay between streamed pieces. The server keeps every request body it received, and
counts streams completed and streams cut off by the client."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[tuple[str, str, dict]] = field(default_factory=list)  # (id, name, input)
    thinking: str | None = None
    status: int = 200
    error: str = "scripted error"
    delay: float = 0.0  # seconds between streamed pieces (and before a whole answer)
    # seconds before the first streamed piece, on top of its delay (a model's time to
    # its first token: the prompt's prefill), and before a whole answer
    first_delay: float = 0.0
    pieces: int = 4  # the text is streamed in this many pieces
    usage: tuple[int, int] = (12, 7)  # prompt (input) and completion (output) tokens


def _split(text: str, n: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(n, 1)))
    return [text[i:i + size] for i in range(0, len(text), size)]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data) if not isinstance(data, str) else data}\n\n".encode()


class ScriptedUpstream:
    def __init__(self, default: Reply | None = None):
        self.default = default or Reply(text="Scripted answer.")
        self.script: deque[Reply | Callable[[dict], Reply]] = deque()
        self.requests: list[dict] = []
        self.completed = 0
        self.cancelled = 0
        self.last_headers: dict[str, str] = {}
        self.last_query = ""
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self.openai, methods=["POST"]),
            Route("/v1/messages", self.anthropic, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
        ])

    def push(self, *replies: Reply | Callable[[dict], Reply]) -> None:
        self.script.extend(replies)

    def _next(self, body: dict, request: Request) -> Reply:
        self.requests.append(body)
        self.last_headers = dict(request.headers)
        self.last_query = request.url.query
        item = self.script.popleft() if self.script else self.default
        return item(body) if callable(item) else item

    async def _wait(self, request: Request, delay: float) -> bool:
        """Sleeps before a whole answer; False (counted as cancelled) if the client left."""
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, delay))
            if await request.is_disconnected():
                self.cancelled += 1
                return False
        self.completed += 1
        return True

    async def _stream(self, pieces: list[bytes], delay: float, first_delay: float = 0.0):
        try:
            if first_delay:
                await asyncio.sleep(first_delay)
            for p in pieces:
                if delay:
                    await asyncio.sleep(delay)
                yield p
            self.completed += 1
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            raise

    # ------------------------------------------------------------------ OpenAI
    async def openai(self, request: Request) -> Response:
        body = await _json_object(request)
        if body is None:  # as the real provider answers it
            return JSONResponse({"error": {"message": "the body is not a JSON object", "type": "invalid_request_error",
                                           "param": None, "code": None}}, status_code=400)
        r = self._next(body, request)
        if r.status >= 400:
            return JSONResponse({"error": {"message": r.error, "type": "scripted_error", "param": None,
                                           "code": str(r.status)}}, status_code=r.status)
        cid, created, model = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time()), body.get("model")
        usage = {"prompt_tokens": r.usage[0], "completion_tokens": r.usage[1],
                 "total_tokens": sum(r.usage)}
        calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                 for i, n, a in r.tool_calls]
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            if not await self._wait(request, r.first_delay + r.delay):
                return Response(status_code=499)
            message: dict[str, Any] = {"role": "assistant", "content": r.text or None, "refusal": None}
            if calls:
                message["tool_calls"] = calls
            return JSONResponse({"id": cid, "object": "chat.completion", "created": created, "model": model,
                                 "choices": [{"index": 0, "message": message, "logprobs": None,
                                              "finish_reason": finish}], "usage": usage})

        def chunk(delta: dict, finish_reason: str | None = None) -> bytes:
            return _sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                         "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                      "finish_reason": finish_reason}]})

        pieces = [chunk({"role": "assistant", "content": ""})]
        pieces += [chunk({"content": t}) for t in _split(r.text, r.pieces)]
        for index, call in enumerate(calls):
            args = call["function"]["arguments"]
            pieces.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                                 "function": {"name": call["function"]["name"],
                                                              "arguments": ""}}]}))
            pieces += [chunk({"tool_calls": [{"index": index, "function": {"arguments": a}}]})
                       for a in _split(args, 3)]
        pieces.append(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            pieces.append(_sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                                "model": model, "choices": [], "usage": usage}))
        pieces.append(_sse("[DONE]"))
        return StreamingResponse(self._stream(pieces, r.delay, r.first_delay), media_type="text/event-stream")

    # ------------------------------------------------------------------ Anthropic
    async def anthropic(self, request: Request) -> Response:
        body = await _json_object(request)
        if body is None:
            return _anthropic_error(400, "invalid_request_error", "the body is not a JSON object")
        r = self._next(body, request)
        if r.status >= 400:
            kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(r.status, "api_error")
            return _anthropic_error(r.status, kind, r.error)
        mid, model = f"msg_{uuid.uuid4().hex[:12]}", body.get("model")
        blocks: list[dict] = []
        if r.thinking:
            blocks.append({"type": "thinking", "thinking": r.thinking, "signature": "sig-" + mid})
        if r.text:
            blocks.append({"type": "text", "text": r.text})
        blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in r.tool_calls]
        stop = "tool_use" if r.tool_calls else "end_turn"
        usage = {"input_tokens": r.usage[0], "output_tokens": r.usage[1]}
        if not body.get("stream"):
            if not await self._wait(request, r.first_delay + r.delay):
                return Response(status_code=499)
            return JSONResponse({"id": mid, "type": "message", "role": "assistant", "model": model,
                                 "content": blocks, "stop_reason": stop, "stop_sequence": None,
                                 "usage": usage})
        pieces = [_sse({"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": r.usage[0], "output_tokens": 1}}}, "message_start"),
            _sse({"type": "ping"}, "ping")]
        for index, b in enumerate(blocks):
            if b["type"] == "thinking":
                start, deltas = {"type": "thinking", "thinking": "", "signature": ""}, [
                    {"type": "thinking_delta", "thinking": t} for t in _split(b["thinking"], 2)] + [
                    {"type": "signature_delta", "signature": b["signature"]}]
            elif b["type"] == "text":
                start, deltas = {"type": "text", "text": ""}, [
                    {"type": "text_delta", "text": t} for t in _split(b["text"], r.pieces)]
            else:
                start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": j}
                          for j in _split(json.dumps(b["input"]), 3)]
            pieces.append(_sse({"type": "content_block_start", "index": index, "content_block": start},
                               "content_block_start"))
            pieces += [_sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
                       for d in deltas]
            pieces.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        pieces.append(_sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": r.usage[1]}}, "message_delta"))
        pieces.append(_sse({"type": "message_stop"}, "message_stop"))
        return StreamingResponse(self._stream(pieces, r.delay, r.first_delay), media_type="text/event-stream")

    async def count_tokens(self, request: Request) -> Response:
        body = await _json_object(request)
        if body is None:
            return _anthropic_error(400, "invalid_request_error", "the body is not a JSON object")
        self.requests.append(body)
        return JSONResponse({"input_tokens": len(json.dumps(body.get("messages"))) // 4})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "scripted-1", "object": "model",
                                                         "created": 0, "owned_by": "scripted"}]})


def _anthropic_error(status: int, kind: str, message: str | None) -> JSONResponse:
    """An error in Anthropic's shape."""
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)


async def _json_object(request: Request) -> dict | None:
    """The request's body as a JSON object of the fields' types the scripted replies
    read; None when it is not one (a provider answers 400)."""
    try:
        body = json.loads(await request.body())
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("messages", []), list) \
            or not isinstance(body.get("stream_options") or {}, dict):
        return None
    return body


class ServerThread:
    """An ASGI app served by uvicorn on 127.0.0.1 in a thread of its own."""

    def __init__(self, app: Any, port: int = 0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="auto",
                                                    timeout_graceful_shutdown=2))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self) -> ServerThread:
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                return self
            time.sleep(0.01)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--text", default="Scripted answer.")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between streamed pieces")
    parser.add_argument("--first-delay", type=float, default=0.0,
                        help="seconds before the first streamed piece (a model's time to first token)")
    parser.add_argument("--pieces", type=int, default=4, help="the text is streamed in this many pieces")
    args = parser.parse_args()
    if min(args.delay, args.first_delay) < 0 or args.pieces < 1:
        parser.error("--delay and --first-delay must be >= 0, --pieces >= 1")
    upstream = ScriptedUpstream(Reply(text=args.text, delay=args.delay, first_delay=args.first_delay,
                                      pieces=args.pieces))
    upstream.requests = deque(maxlen=16)  # type: ignore[assignment]  # a long run keeps only the last
    uvicorn.run(upstream.app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
