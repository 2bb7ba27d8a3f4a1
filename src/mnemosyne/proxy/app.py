"""The proxy's HTTP surface (Starlette): the two managed endpoints, the HTTP API,
and every other path passed through byte for byte.

Identity (docs/design.md §Identity), per request:
- tenant: the tenant a proxy key is mapped to (Config.keys, when the client's API key
  is one; the proxy then calls upstream with the configured provider key), else the
  X-Mnemo-Tenant header, else Config.default_tenant. None, or one the database does
  not know: refused in the provider's error shape (401, 403).
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
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import MnemoError, UnknownTenant
from ..mcp_server import Identity as McpIdentity
from ..mcp_server import MemoryTools
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
MN_STATUS = {"MN001": 400, "MN002": 404, "MN003": 404, "MN004": 400, "MN005": 400, "MN006": 400,
             "MN007": 413, "MN008": 403, "MN009": 409, "MN010": 404, "MN011": 500, "MN012": 409}


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
        self.tools.db = self.memory.db
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
        if key is None or key in self.config.keys:
            out.pop("authorization", None)
            out.pop("x-api-key", None)
            if provider_key:
                if protocol == "anthropic":
                    out["x-api-key"] = provider_key
                else:
                    out["authorization"] = f"Bearer {provider_key}"
        return out

    def identify(self, request: Request) -> Identity | None:
        key = self._client_key(request)
        tenant = self.config.keys.get(key) if key else None
        tenant = tenant or request.headers.get("x-mnemo-tenant") or self.config.default_tenant
        if not tenant:
            return None
        h = request.headers
        return Identity(tenant, h.get("x-mnemo-session") or None,
                        h.get("x-mnemo-agent") or self.config.default_agent,
                        h.get("x-mnemo-channel") or self.config.default_channel)

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
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return await self.passthrough(request, raw)
        ident = self.identify(request)
        if ident is None:
            return provider_error(protocol, 401, "no tenant: send X-Mnemo-Tenant, or use a proxy key "
                                  "mapped to a tenant (mnemo serve --key KEY=TENANT)", "no_tenant")
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
            except MnemoError as e:
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
                      max_rounds=self.config.max_phantom_rounds)
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
        prepared = await self.memory.prepare(
            ident, messages, model=model, context_window=window,
            response_reserve=int(reserve) if str(reserve).isdigit() else DEFAULT_RESPONSE_RESERVE,
            tools=client_tools, phantom=phantom, memory_tokens=self.config.memory_tokens)
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
        method = MNEMO_API.get(request.path_params["name"])
        if method is None:
            return JSONResponse({"error": {"code": "MN001", "message": "unknown endpoint",
                                           "hint": f"one of {', '.join(MNEMO_API)}"}}, status_code=404)
        try:
            args = json.loads(await request.body() or b"{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return JSONResponse({"error": {"code": "MN001", "message": "the body must be a JSON object"}},
                                status_code=400)
        fn = getattr(self.tools, method)
        params = inspect.signature(fn).parameters
        unknown = sorted(set(args) - set(params))
        if unknown:
            return JSONResponse({"error": {"code": "MN001", "message": f"unknown field(s) {', '.join(unknown)}",
                                           "hint": f"fields: {', '.join(params)}"}}, status_code=400)
        ident = self.identify(request)
        if "tenant_id" in params and not args.get("tenant_id") and ident:
            args["tenant_id"] = ident.tenant
        try:
            if method != "query_decisions" and args.get("session_id") and not _is_uuid(args["session_id"]):
                # the HTTP API's session ids are any string: each names a session of its own
                args["session_id"] = str(await self.memory._sql(self.memory.db.open_session(
                    args.get("tenant_id") or "", str(args["session_id"]),
                    agent_id=args.get("agent_id") or self.config.default_agent,
                    channel=args.get("channel") or self.config.default_channel,
                    metadata={"source": "mnemo-http"})))
            if method == "get_artifact" and isinstance(args.get("artifact_id"), str):
                args["artifact_id"] = int(re.sub(r"^art_", "", args["artifact_id"]))
            return JSONResponse(await fn(**args))
        except Unavailable as e:
            return JSONResponse({"error": {"code": "unavailable", "message": str(e)}}, status_code=503)
        except MnemoError as e:
            return JSONResponse({"error": {"code": e.sqlstate, "message": e.message, "hint": e.hint}},
                                status_code=MN_STATUS.get(e.sqlstate, 400))
        except ValueError as e:
            return JSONResponse({"error": {"code": "MN001", "message": str(e)}}, status_code=400)
        except Exception as e:  # the MCP tools' ToolError: "[MNxxx] message"
            m = re.match(r"\[(MN\d{3})\] (.*)", str(e), re.DOTALL)
            if not m:
                raise
            return JSONResponse({"error": {"code": m.group(1), "message": m.group(2)}},
                                status_code=MN_STATUS.get(m.group(1), 400))


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

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/mnemo/v1/{name}", proxy.mnemo_api, methods=["POST"]),
        Route("/{path:path}", passthrough, methods=methods),
    ], lifespan=lifespan)
    app.state.proxy = proxy
    return app
