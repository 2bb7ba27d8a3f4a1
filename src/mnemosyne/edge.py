"""The network edge of `mnemo serve` and `mnemo mcp --transport http` (issue 40): who
the caller is, and how much it may send and run at once. An ASGI middleware in front
of the surface's app; the surface then acts for `scope["mnemo.caller"]` only.

Who (one of three modes, Edge.mode):
- keys (the default): every request presents an API key (Authorization: Bearer, or
  x-api-key), made by `mnemo keys create`; the key is the tenant. No key: 401; an
  unknown, revoked or expired key: 401; a key with X-Mnemo-Tenant naming another
  tenant: 403 (MN008). The surface checks the tenants named in bodies and ids the
  same way, and binds its database work to the key (AsyncClient.bound), so the
  database itself refuses another tenant.
- local: a single user on the loopback interface. A request without a key acts for
  the default tenant (said in a log line at start-up); one with a key, for the key's.
- gateway: behind a trusted gateway that authenticates callers itself: a request
  without a key acts for its X-Mnemo-Tenant header (else the default tenant).
A presented key is a Mnemosyne key when it starts with 'mnk_'; any other value is a
provider's key, which the proxy passes upstream in local and gateway modes.

While the database cannot be reached, a key it accepted in the last OFFLINE_GRACE_S
still names its tenant (the request then goes upstream unmanaged, as the proxy does
for every request then); any other key gets 503.

How much: a body over max_body_bytes gets 413 (before it is read, when its
Content-Length says so); a body not received within body_timeout gets 408; a tenant
with max_concurrent requests in flight gets 429. Each in the surface's own error
shape (Edge.error).
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response

log = logging.getLogger("mnemosyne.edge")

KEY_PREFIX = "mnk_"
MODES = ("keys", "local", "gateway")
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_CONCURRENT = 32
DEFAULT_BODY_TIMEOUT = 30.0
OFFLINE_GRACE_S = 300.0  # how long a key the database accepted is trusted while it is down
DRAIN_FACTOR = 4  # a body over the cap is read and dropped up to this many times the cap


@dataclass(frozen=True)
class Caller:
    """Who a request acts for: a tenant, and the API key it presented (None in local
    and gateway modes without a key)."""
    tenant: str
    key: str | None


class Refused(Exception):
    """A request the edge (or a surface, for a tenant named in its body) refuses."""

    def __init__(self, status: int, code: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.hint = status, code, message, hint


def mnemo_error(status: int, code: str, message: str, hint: str | None = None,
                headers: dict | None = None) -> JSONResponse:
    """The HTTP API's one error shape: {"error": {"code", "message", "hint"}}."""
    return JSONResponse({"error": {"code": code, "message": message, "hint": hint}}, status_code=status,
                        headers=headers)


def jsonrpc_error(status: int, code: str, message: str, hint: str | None = None) -> JSONResponse:
    """MCP's own shape for a refused HTTP request: a JSON-RPC error, the project code in
    its data."""
    rpc = -32600 if status < 500 else -32603
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
        "code": rpc, "message": f"[{code}] {message}", "data": {"code": code, "message": message, "hint": hint}}},
        status_code=status)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def presented_key(headers: dict[str, str]) -> str | None:
    """The key a request presents: Authorization: Bearer, else x-api-key."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return headers.get("x-api-key") or None


def check_tenant(caller: Caller, named: Any, where: str) -> None:
    """Refuses (403, MN008) a tenant named in a request that is not the caller's."""
    if named not in (None, "") and named != caller.tenant:
        raise Refused(403, "MN008", f"this request acts for tenant {caller.tenant!r}; "
                      f"the {where} names tenant {named!r}",
                      "An API key acts for its own tenant only: leave tenant_id out, or use that tenant's key.")


ErrorShape = Callable[[dict, int, str, str, "str | None"], Response]
Resolver = Callable[[str], Awaitable["str | None"]]


class Edge:
    """ASGI middleware: authenticates, caps bodies and concurrency, then calls `app`
    with scope["mnemo.caller"] set."""

    def __init__(self, app: Any, *, resolve: Resolver, error: ErrorShape, mode: str = "keys",
                 default_tenant: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_concurrent: int = DEFAULT_MAX_CONCURRENT, body_timeout: float = DEFAULT_BODY_TIMEOUT,
                 unavailable: type[Exception] | tuple[type[Exception], ...] = ()):
        if mode not in MODES:
            raise ValueError(f"edge mode {mode!r} is not one of {', '.join(MODES)}")
        if mode == "local" and not default_tenant:
            raise ValueError("local mode needs a default tenant")
        self.app, self.resolve, self.error, self.mode = app, resolve, error, mode
        self.default_tenant, self.max_body_bytes = default_tenant, max_body_bytes
        self.max_concurrent, self.body_timeout, self.unavailable = max_concurrent, body_timeout, unavailable
        self.in_flight: dict[str, int] = {}
        self.recent: dict[bytes, tuple[str, float]] = {}  # sha256(key) -> (tenant, when the database said so)

    def __getattr__(self, name: str) -> Any:  # app.state and the like reach the app
        return getattr(self.app, name)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        try:
            body = await self._body(headers, receive)
            caller = await self._caller(headers)
        except Refused as e:
            response = self.error(scope, e.status, e.code, e.message, e.hint)
            if e.status in (408, 413):  # the body may be unread: the connection cannot serve another
                response.headers["connection"] = "close"
            await response(scope, receive, send)
            return
        count = self.in_flight.get(caller.tenant, 0)
        if count >= self.max_concurrent:
            await self.error(scope, 429, "MN013", f"tenant {caller.tenant!r} has {count} requests in flight",
                             f"At most {self.max_concurrent} at once: retry when one has ended.")(
                scope, receive, send)
            return
        self.in_flight[caller.tenant] = count + 1
        scope["mnemo.caller"] = caller
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # http.disconnect, when the client leaves

        started = False

        async def watched(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, replay, watched)
        except Exception:
            # a bug: its traceback goes to the server's log, never to the client
            log.exception("mnemo edge: %s %s failed", scope.get("method"), scope.get("path"))
            if started:
                raise
            await self.error(scope, 500, "MN000", "internal error (logged by the server)", None)(
                scope, receive, send)
        finally:
            left = self.in_flight[caller.tenant] - 1
            if left:
                self.in_flight[caller.tenant] = left
            else:
                del self.in_flight[caller.tenant]

    async def _body(self, headers: dict[str, str], receive: Callable) -> bytes:
        """The whole body, at most max_body_bytes, within body_timeout. A body over the
        cap is read on and dropped (up to DRAIN_FACTOR times the cap), so that the
        client, still sending, gets the 413 rather than a broken connection."""
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body_bytes * DRAIN_FACTOR:
            raise Refused(413, "MN007", f"the body is {int(length)} bytes",
                          f"At most {self.max_body_bytes} bytes per request.")
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.001))
            except TimeoutError:
                raise Refused(408, "MN001", f"the body did not arrive within {self.body_timeout:g} s") from None
            if message["type"] == "http.disconnect":
                raise Refused(400, "MN001", "the client left before its body was sent")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= self.max_body_bytes:
                chunks.append(chunk)
            elif not message.get("more_body") or size > self.max_body_bytes * DRAIN_FACTOR:
                raise Refused(413, "MN007", f"the body is over {self.max_body_bytes} bytes",
                              f"At most {self.max_body_bytes} bytes per request.")
            else:
                chunks.clear()
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _caller(self, headers: dict[str, str]) -> Caller:
        key = presented_key(headers)
        named = headers.get("x-mnemo-tenant") or None
        if key and key.startswith(KEY_PREFIX):
            digest = hashlib.sha256(key.encode()).digest()
            try:
                tenant = await self.resolve(key)
            except self.unavailable as e:
                # the database is down: a key it accepted moments ago still names its
                # tenant, so the agent goes on unmanaged rather than blocked
                seen = self.recent.get(digest)
                if seen is None or time.monotonic() - seen[1] > OFFLINE_GRACE_S:
                    raise Refused(503, "unavailable", f"the database cannot be reached: {e}",
                                  "Retry shortly.") from e
                tenant = seen[0]
            else:
                if tenant is None:
                    self.recent.pop(digest, None)
                else:
                    if len(self.recent) > 10_000:
                        self.recent.clear()
                    self.recent[digest] = (tenant, time.monotonic())
            if tenant is None:
                raise Refused(401, "MN014", "unknown, revoked or expired API key",
                              "mnemo keys list TENANT shows a tenant's keys; mnemo keys create makes one.")
            caller = Caller(tenant, key)
            check_tenant(caller, named, "X-Mnemo-Tenant header")
            return caller
        if self.mode == "gateway" and (named or self.default_tenant):
            return Caller(named or self.default_tenant, None)  # type: ignore[arg-type]
        if self.mode == "local":
            if named and named != self.default_tenant:
                check_tenant(Caller(self.default_tenant, None), named, "X-Mnemo-Tenant header")  # type: ignore[arg-type]
            return Caller(self.default_tenant, None)  # type: ignore[arg-type]
        raise Refused(401, "MN014", "no API key: send Authorization: Bearer mnk_... (or x-api-key)",
                      "mnemo keys create TENANT makes one.")

