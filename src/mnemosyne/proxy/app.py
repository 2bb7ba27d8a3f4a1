"""The proxy's HTTP surface (Starlette): the two managed endpoints, the HTTP API,
and every other path passed through byte for byte.

Identity (docs/design.md §Identity), per request:
- tenant: the edge's (mnemosyne.edge, in front of every path): the tenant of the
  request's API key (mnemo keys create), the proxy then calling upstream with the
  configured provider key; without a key, Config.default_tenant in local mode or the
  X-Mnemo-Tenant header in gateway mode. Refused in the provider's error shape: no or
  a bad key (401), another tenant named (403), a body too large (413), too many
  requests of the tenant in flight (429). Every database call of the request is bound
  to its key (AsyncClient.bound), so the database refuses any other tenant too.
- session: X-Mnemo-Session (any string: the key of mnemo.open_session; a UUID of an
  existing session adopts it), else derived from the conversation.
- agent and channel: X-Mnemo-Agent, X-Mnemo-Channel (default Config's).
- X-Mnemo-Context-Window: the model's window, where the built-in table does not know it.
- X-Mnemo-Bypass: 1 sends the request unmanaged.
X-Mnemo-* headers never go upstream. Responses say X-Mnemo-Status (managed, or bypass
when the request went through unmanaged), X-Mnemo-Session (the session's id) and
Server-Timing (milliseconds of mnemo-open, mnemo-sync and mnemo-compile)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import re
import uuid
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import psycopg
from pydantic import ValidationError, validate_call
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..edge import KEY_PREFIX, Caller, Edge, Refused, check_tenant, mnemo_error
from ..errors import MnemoError, UnknownTenant
from ..mcp_server import DB_DOWN, Failure, MemoryTools, argument_errors
from ..mcp_server import Identity as McpIdentity
from . import anthropic_format as af
from .config import DEFAULT_RESPONSE_RESERVE, Config
from .memory import Identity, Memory, Unavailable
from .relay import AnthropicRelay, Exchange, OpenAIRelay, UpstreamError, close_upstream

log = logging.getLogger("mnemosyne.proxy")

HOP_BY_HOP = {"host", "content-length", "connection", "keep-alive", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"}
ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 429: "rate_limit_error", 502: "api_error",
                    503: "overloaded_error", 504: "timeout_error"}
# the HTTP API (docs/usage/http-api.md): path -> MemoryTools method (the MCP server's, shared)
MNEMO_API = {"record_event": "record_event", "build_acb": "build_acb",
             "get_artifact": "get_artifact", "query_decisions": "query_decisions"}
MAX_CONTEXT_WINDOW = 100_000_000
MN_STATUS = {"MN001": 400, "MN002": 404, "MN003": 404, "MN004": 400, "MN005": 400, "MN006": 400,
             "MN007": 413, "MN008": 403, "MN009": 409, "MN010": 404, "MN011": 500, "MN012": 409,
             "MN013": 429, "MN014": 401, "unavailable": 503}


def provider_error(protocol: str, status: int, message: str, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    """An error in the shape the client's SDK parses."""
    if protocol == "anthropic":
        body: dict = {"type": "error", "error": {"type": ANTHROPIC_ERRORS.get(status, "api_error"),
                                                 "message": message}}
    else:
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


class Proxy:
    def __init__(self, config: Config):
        self.config = config
        self.memory = Memory(config.dsn, config.db_pool_size, config.db_timeout)
        self.http: httpx2.AsyncClient | None = None
        self.tools = MemoryTools(config.dsn, McpIdentity(config.default_tenant, None,
                                                         config.default_agent, config.default_channel))

    async def start(self) -> None:
        await self.memory.open()
        self.tools.pool_db = self.memory.db
        if self.config.mode == "local":
            log.warning("mnemo proxy: local single-user mode: requests without an API key act for tenant %r",
                        self.config.default_tenant)
        elif self.config.mode == "gateway":
            log.warning("mnemo proxy: trusted-gateway mode: requests without an API key act for their "
                        "X-Mnemo-Tenant header; only a gateway that authenticates callers may reach this port")
        limits = httpx2.Limits(max_connections=None, max_keepalive_connections=64)
        self.http = httpx2.AsyncClient(timeout=httpx2.Timeout(self.config.upstream_timeout,
                                                              connect=self.config.connect_timeout),
                                       limits=limits)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.aclose()
        await self.memory.close()

    # ------------------------------------------------------------------ identity
    def _protocol_of(self, request: Request) -> str:
        h = request.headers
        if request.url.path.startswith("/v1/messages") or "anthropic-version" in h or "x-api-key" in h:
            return "anthropic"
        return "openai"

    def _client_key(self, request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return request.headers.get("x-api-key")

    def upstream_headers(self, request: Request, protocol: str, keep_encoding: bool) -> dict[str, str]:
        """The client's headers for upstream: no hop-by-hop or X-Mnemo-* header, and a
        proxy key replaced by the configured provider key."""
        out = {k: v for k, v in request.headers.items()
               if k not in HOP_BY_HOP and not k.startswith("x-mnemo-")
               and (keep_encoding or k != "accept-encoding")}
        key = self._client_key(request)
        provider_key = self.config.anthropic_api_key if protocol == "anthropic" else self.config.openai_api_key
        if key is None or key.startswith(KEY_PREFIX):
            out.pop("authorization", None)
            out.pop("x-api-key", None)
            if provider_key:
                if protocol == "anthropic":
                    out["x-api-key"] = provider_key
                else:
                    out["authorization"] = f"Bearer {provider_key}"
        return out

    def identify(self, request: Request) -> Identity | None:
        """The request's identity: its caller as the edge authenticated it."""
        caller: Caller | None = request.scope.get("mnemo.caller")
        if caller is None:
            return None
        h = request.headers
        return Identity(caller.tenant, h.get("x-mnemo-session") or None,
                        h.get("x-mnemo-agent") or self.config.default_agent,
                        h.get("x-mnemo-channel") or self.config.default_channel, caller.key)

    def upstream_url(self, protocol: str, path: str) -> str:
        if protocol == "anthropic":
            return self.config.anthropic_base_url.rstrip("/") + path
        base = self.config.openai_base_url.rstrip("/")
        return base + (path[3:] if path.startswith("/v1/") and base.endswith("/v1") else path)

    async def send(self, protocol: str, path: str, body: dict, headers: dict) -> httpx2.Response:
        req = self.http.build_request("POST", self.upstream_url(protocol, path),
                                      content=json.dumps(body).encode(),
                                      headers={**headers, "content-type": "application/json"})
        return await self.http.send(req, stream=True)

    @staticmethod
    def response_headers(resp: httpx2.Response, raw: bool) -> dict[str, str]:
        skip = HOP_BY_HOP | ({"content-type"} if not raw else set()) \
            | (set() if raw else {"content-encoding"})
        return {k: v for k, v in resp.headers.items() if k.lower() not in skip}

    # ------------------------------------------------------------------ managed calls
    async def managed(self, request: Request, protocol: str) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON (bad UTF-8 included), or nested past Python's stack
            return provider_error(protocol, 400, "the body is not JSON (Mnemosyne proxy)", "MN001")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return await self.passthrough(request, raw)
        problem = body_problem(protocol, body)
        if problem:
            return provider_error(protocol, 400, f"{problem} (Mnemosyne proxy)", "MN001")
        ident = self.identify(request)
        if ident is None:
            return provider_error(protocol, 401, "no API key (Mnemosyne): mnemo keys create TENANT makes one",
                                  "MN014")
        headers = self.upstream_headers(request, protocol, keep_encoding=False)
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")  # ?beta=true
        prepared, reason = None, None
        if request.headers.get("x-mnemo-bypass", "").lower() in ("1", "true", "yes"):
            reason = "requested"
        else:
            try:
                prepared, upstream_body, phantom_names = await self._prepare(request, protocol, body, ident)
            except UnknownTenant as e:
                return provider_error(protocol, 403, f"{e.message} (Mnemosyne)", "unknown_tenant")
            except Unavailable as e:
                reason = f"database unreachable: {e}"
            except QuestionTooLarge as e:
                return provider_error(protocol, 400, f"{e} (Mnemosyne proxy)", "MN007")
            except ValueError as e:  # a header out of range
                return provider_error(protocol, 400, f"{e} (Mnemosyne proxy)", "MN001")
            except psycopg.DataError as e:  # what PostgreSQL cannot hold (a \u0000 in a string)
                return provider_error(protocol, 400, f"invalid value: {str(e).splitlines()[0]} (Mnemosyne)",
                                      "MN001")
            except MnemoError as e:
                if e.sqlstate == "MN008":  # another tenant's session, or a key revoked meanwhile
                    return provider_error(protocol, 403, f"{e.message} (Mnemosyne)", e.sqlstate)
                reason = f"history not recorded: {e}"
        if prepared is None:
            log.warning("mnemo proxy: %s %s for tenant %s passed through unmanaged (%s)",
                        request.method, path, ident.tenant, reason)
            upstream_body, phantom_names = body, set()
        mnemo = {"x-mnemo-status": "managed" if prepared else "bypass"}
        if prepared:
            mnemo["x-mnemo-session"] = str(prepared.session_id)
            mnemo["server-timing"] = ", ".join(f"mnemo-{k};dur={v}" for k, v in prepared.timings_ms.items())
        try:
            resp = await until_disconnect(request, self.send(protocol, path, upstream_body, headers))
        except ClientGone:
            log.info("mnemo proxy: client left before the answer; upstream call cancelled")
            return Response(status_code=499)
        except httpx2.TimeoutException:
            return provider_error(protocol, 504, "upstream timed out (Mnemosyne proxy)", "timeout", mnemo)
        except httpx2.TransportError as e:
            return provider_error(protocol, 502, f"upstream unreachable: {e} (Mnemosyne proxy)",
                                  "upstream_unreachable", mnemo)
        if resp.status_code >= 400 or prepared is None or body.get("n", 1) != 1:
            # errors and unmanaged answers reach the client as the provider sent them (and
            # so do n > 1 answers: several replies, none of them the conversation's)
            return StreamingResponse(_raw(resp), status_code=resp.status_code,
                                     headers={**self.response_headers(resp, raw=True), **mnemo})
        out_headers = {**self.response_headers(resp, raw=False), **mnemo}
        ex = Exchange(self.memory, ident.tenant, prepared.session_id, prepared.positions, phantom_names,
                      upstream_body, lambda b: self.send(protocol, path, b, headers),
                      max_rounds=self.config.max_phantom_rounds, key=ident.key)
        relay: OpenAIRelay | AnthropicRelay
        if protocol == "anthropic":
            relay = AnthropicRelay(ex)
        else:
            relay = OpenAIRelay(ex, want_usage=bool((body.get("stream_options") or {}).get("include_usage")))
        if body.get("stream"):
            return StreamingResponse(relay.stream(resp), media_type="text/event-stream",
                                     headers=out_headers, background=BackgroundTask(ex.record))
        try:
            out = await until_disconnect(request, self._whole_answer(resp, relay))
        except ClientGone:
            log.info("mnemo proxy: client left; upstream call of session %s cancelled", prepared.session_id)
            return Response(status_code=499)
        except UpstreamError as e:
            return Response(e.body, status_code=e.status, media_type="application/json", headers=mnemo)
        except httpx2.TimeoutException:
            return provider_error(protocol, 504, "upstream timed out (Mnemosyne proxy)", "timeout", mnemo)
        except (httpx2.TransportError, ValueError) as e:
            return provider_error(protocol, 502, f"upstream failed: {e} (Mnemosyne proxy)",
                                  "upstream_unreachable", mnemo)
        finally:
            await close_upstream(resp)
        return JSONResponse(out, headers=out_headers, background=BackgroundTask(ex.record))

    @staticmethod
    async def _whole_answer(resp: httpx2.Response, relay: OpenAIRelay | AnthropicRelay) -> dict:
        try:
            data = json.loads(await resp.aread())
        finally:
            await close_upstream(resp)
        return await relay.complete(data)

    async def _prepare(self, request: Request, protocol: str, body: dict,
                       ident: Identity) -> tuple[Any, dict, set[str]]:
        """The session's compiled context in place of the client's messages."""
        model = body.get("model") or "unknown"
        window_header = request.headers.get("x-mnemo-context-window", "")
        window = int(window_header) if window_header.isdigit() else self.config.window_for(model)
        if window_header and not (window_header.isdigit() and 256 <= window <= MAX_CONTEXT_WINDOW):
            raise ValueError(f"X-Mnemo-Context-Window must be a number of tokens from 256 to {MAX_CONTEXT_WINDOW}")
        reserve = body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_RESPONSE_RESERVE
        client_tools = body.get("tools") or []
        client_names = {(t.get("function") or {}).get("name") or t.get("name") for t in client_tools
                        if isinstance(t, dict)}
        phantom = (await self.memory.has_phantom_tools() and body.get("n", 1) == 1
                   and body.get("tool_choice") not in ("none", {"type": "none"}))
        if protocol == "anthropic":
            messages = af.to_openai(body.get("system"), body["messages"])
        else:
            messages = body["messages"]
        reserve = int(reserve) if str(reserve).isdigit() else DEFAULT_RESPONSE_RESERVE
        prepared = await self.memory.prepare(
            ident, messages, model=model, context_window=window, response_reserve=reserve,
            tools=client_tools, phantom=phantom, memory_tokens=self.config.memory_tokens)
        await self._newest_question_whole(messages, prepared.messages, window, reserve)
        phantom_tools = [t for t in prepared.phantom_tools
                         if (t.get("function") or {}).get("name") not in client_names]
        names = {t["function"]["name"] for t in phantom_tools}
        out = dict(body)
        if protocol == "anthropic":
            system_extra, out["messages"] = af.to_anthropic(prepared.messages)
            system = af.with_memory_system(body.get("system"), system_extra)
            if system:
                out["system"] = system
            if phantom_tools:
                out["tools"] = client_tools + [af.tool_definition(t) for t in phantom_tools]
            af.limit_cache_breakpoints(out)
        else:
            lead = []
            for m in messages:
                if m.get("role") not in ("system", "developer"):
                    break
                lead.append(m)
            out["messages"] = lead + prepared.messages
            if phantom_tools:
                out["tools"] = client_tools + phantom_tools
            if body.get("stream"):
                out["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return prepared, out, names

    async def _newest_question_whole(self, messages: list[dict], compiled: list[dict], window: int,
                                     reserve: int) -> None:
        """The newest user message goes upstream whole, or the call is refused (400,
        naming the window, the reserve and the message's size): a model answering a
        stub of the question it was asked answers something else."""
        newest = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        if newest is None:
            return
        sent = next((m for m in reversed(compiled) if m.get("role") == "user"), None)
        if sent is not None and sent.get("content") == newest.get("content"):
            return
        content = newest.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        tokens = await self.memory._sql(self.memory.db.count_tokens(text))
        raise QuestionTooLarge(f"the newest user message ({tokens} tokens) does not fit whole in the "
                               f"context window ({window} tokens) less the response reserve ({reserve} tokens, "
                               "max_tokens or the default) and the system prompt: raise "
                               "X-Mnemo-Context-Window or lower max_tokens")

    # ------------------------------------------------------------------ pass-through
    async def passthrough(self, request: Request, body: bytes | None = None) -> Response:
        protocol = self._protocol_of(request)
        url = self.upstream_url(protocol, request.url.path)
        if request.url.query:
            url += "?" + request.url.query
        headers = self.upstream_headers(request, protocol, keep_encoding=True)
        if body is None:
            body = await request.body()
        # the body as bytes (httpx sets its Content-Length), none at all when empty (a GET)
        req = self.http.build_request(request.method, url, headers=headers, content=body or None)
        try:
            resp = await self.http.send(req, stream=True)
        except httpx2.TimeoutException:
            return provider_error(protocol, 504, "upstream timed out (Mnemosyne proxy)", "timeout")
        except httpx2.TransportError as e:
            return provider_error(protocol, 502, f"upstream unreachable: {e} (Mnemosyne proxy)",
                                  "upstream_unreachable")
        return StreamingResponse(_raw(resp), status_code=resp.status_code,
                                 headers=self.response_headers(resp, raw=True))

    # ------------------------------------------------------------------------ the HTTP API
    async def mnemo_api(self, request: Request) -> Response:
        """The HTTP API: one MCP tool per path, the body its arguments, answered
        as the tool's result or {"error": {"code", "message", "hint"}}. A body naming
        another tenant than the caller's is refused (403) before anything runs; the
        tool then runs in one transaction bound to the caller's key (nothing of a
        failed call is kept)."""
        name = request.path_params["name"]
        method = MNEMO_API.get(name)
        if method is None:
            return mnemo_error(404, "MN001", f"unknown endpoint {name!r}", f"One of {', '.join(MNEMO_API)}.")
        caller: Caller = request.scope["mnemo.caller"]
        try:
            args = json.loads(await request.body() or b"{}")
        except (ValueError, RecursionError):  # UnicodeDecodeError included; nested past the stack
            args = None
        if not isinstance(args, dict):
            return mnemo_error(400, "MN001", "the body must be a JSON object (UTF-8)",
                               "e.g. {\"kind\": \"message\", \"content\": {\"text\": \"...\"}}")
        fn = getattr(self.tools, method)
        params = inspect.signature(fn).parameters
        unknown = sorted(set(args) - set(params))
        if unknown:
            return mnemo_error(400, "MN001", f"unknown field(s) {', '.join(unknown)}", f"Fields: {', '.join(params)}.")
        try:
            check_tenant(caller, args.get("tenant_id"), "body's tenant_id")
        except Refused as e:
            return mnemo_error(e.status, e.code, e.message, e.hint)
        if "tenant_id" in params:
            args["tenant_id"] = caller.tenant

        async def call() -> Any:
            if method != "query_decisions" and isinstance(args.get("session_id"), str) \
                    and not _is_uuid(args["session_id"]):
                # the HTTP API's session ids are any string: each names a session of its own
                args["session_id"] = str(await self.tools._sql(self.tools.db.open_session(
                    caller.tenant, args["session_id"],
                    agent_id=args.get("agent_id") if isinstance(args.get("agent_id"), str) else
                    self.config.default_agent,
                    channel=args.get("channel") if isinstance(args.get("channel"), str) else
                    self.config.default_channel, metadata={"source": "mnemo-http"})))
            if method == "get_artifact" and isinstance(args.get("artifact_id"), str):
                args["artifact_id"] = _artifact_id(args["artifact_id"])
            return await validate_call(fn)(**args)

        try:
            return JSONResponse(await self.tools.bound(caller, call))
        except ValidationError as e:
            f = argument_errors(e)
            return mnemo_error(400, f.code, f.message, f.hint)
        except Failure as e:
            return mnemo_error(e.status or MN_STATUS.get(e.code, 400), e.code, e.message, e.hint)
        except MnemoError as e:
            return mnemo_error(MN_STATUS.get(e.sqlstate, 400), e.sqlstate, e.message, e.hint)
        except DB_DOWN:
            return mnemo_error(503, "unavailable", "the database cannot be reached", "Retry shortly.")
        except psycopg.DataError as e:
            return mnemo_error(400, "MN001", f"invalid value: {str(e).splitlines()[0]}")


def _artifact_id(value: str) -> int:
    """art_N or N: the artifact's number (MN001 otherwise)."""
    digits = re.sub(r"^art_", "", value.strip())
    if not digits.isdigit() or len(digits) > 18:
        raise Failure("MN001", f"artifact_id {value!r} is not an artifact id", "art_N or N, as record_event returned it.")
    return int(digits)


# What a managed call's fields must be, where the proxy reads them (the provider checks
# the rest): name -> (types, what to say).
FIELD_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "model": ((str,), "a string"), "stream": ((bool,), "true or false"),
    "stream_options": ((dict,), "an object"), "n": ((int,), "an integer"),
    "max_tokens": ((int,), "an integer"), "max_completion_tokens": ((int,), "an integer"),
    "tools": ((list,), "an array"), "tool_choice": ((str, dict), "a string or an object"),
    "system": ((str, list), "a string or an array"),
}


def body_problem(protocol: str, body: dict) -> str | None:
    """What is wrong with a managed call's body, as the provider would refuse it (400):
    a field the proxy reads of the wrong type, or a message that is not an object."""
    for name, (types, what) in FIELD_TYPES.items():
        value = body.get(name)
        if value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            return f"{name} must be {what}"
    if any(not isinstance(m, dict) for m in body["messages"]):
        return "each message must be an object"
    if any(not isinstance(t, dict) for t in body.get("tools") or []):
        return "each tool must be an object"
    if protocol == "anthropic" and isinstance(body.get("system"), list) \
            and any(not isinstance(b, dict) for b in body["system"]):
        return "each system block must be an object"
    return None


class QuestionTooLarge(Exception):
    """The newest user message cannot go upstream whole in the window."""


class ClientGone(Exception):
    """The client disconnected before its (non-streamed) answer was ready."""


async def until_disconnect(request: Request, coro: Any) -> Any:
    """Awaits coro, cancelled (and the upstream call with it) when the client leaves:
    a streamed answer is cancelled by Starlette itself, a whole one is not."""
    task = asyncio.ensure_future(coro)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.25)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ClientGone
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
        return True
    except ValueError:
        return False


async def _raw(resp: httpx2.Response):
    """The upstream body as it came (still encoded), closed even when the client leaves."""
    try:
        async for chunk in resp.aiter_raw():
            yield chunk
    finally:
        await close_upstream(resp)


def create_app(config: Config) -> Starlette:
    proxy = Proxy(config)

    @asynccontextmanager
    async def lifespan(_app: Starlette):
        await proxy.start()
        try:
            yield
        finally:
            await proxy.stop()

    async def chat_completions(request: Request) -> Response:
        return await proxy.managed(request, "openai")

    async def messages(request: Request) -> Response:
        return await proxy.managed(request, "anthropic")

    async def passthrough(request: Request) -> Response:
        return await proxy.passthrough(request)

    async def crashed(request: Request, exc: Exception) -> Response:
        """A bug's answer, in the surface's shape: its traceback goes to the log only."""
        return error(request.scope, 500, "MN000", "internal error (logged by the server)", None)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/mnemo/v1/{name}", proxy.mnemo_api, methods=["POST"]),
        Route("/{path:path}", passthrough, methods=methods),
    ], lifespan=lifespan, exception_handlers={Exception: crashed})
    app.state.proxy = proxy

    async def resolve(key: str) -> str | None:
        return await proxy.memory._sql(proxy.memory.db.api_key_tenant(key))

    def error(scope: dict, status: int, code: str, message: str, hint: str | None) -> Response:
        if scope.get("path", "").startswith("/mnemo/"):
            return mnemo_error(status, code, message, hint)
        request = Request(scope)
        text = f"{message} (Mnemosyne{': ' + hint if hint else ''})"
        return provider_error(proxy._protocol_of(request), status, text, code)

    return Edge(app, resolve=resolve, error=error, mode=config.mode, default_tenant=config.default_tenant,
                max_body_bytes=config.max_body_bytes, max_concurrent=config.max_concurrent,
                unavailable=Unavailable)

