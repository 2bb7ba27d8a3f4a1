"""Mnemosyne's MCP server (docs/design.md §Surfaces), on the official `mcp` SDK: stdio and
streamable HTTP. Each tool is one call of the SQL API through the async client.

Identity (docs/design.md §Identity): every tool takes optional tenant_id, session_id, agent_id
and channel; what a call leaves out comes from the server's configuration
(`mnemo mcp --tenant ... --session ... --agent ... --channel ...`, or MNEMO_TENANT,
MNEMO_SESSION, MNEMO_AGENT, MNEMO_CHANNEL). A call that needs a session and names
none, on a server configured with none, gets one session per (tenant, agent,
channel), started on first use and kept for the server's life.

A tool is a method of :class:`MemoryTools` plus an entry in :data:`TOOLS`. The
paging tools (memory_query, memory_restore, memory_release; docs/design.md §Phantom tools) work on
the session's semantic objects, whose ids (obj:N, msg:N, mem:N) the compiled context
and memory_objects show.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from psycopg_pool import PoolTimeout
from pydantic import Field, ValidationError

from .aio import AsyncClient, bound, connect_async
from .edge import Caller, Refused, check_tenant
from .errors import MnemoError

log = logging.getLogger("mnemosyne.mcp")

# The request a tool runs for, on a network surface (MCP over HTTP, the HTTP API): its
# caller, its database client (one transaction bound to the caller's API key), and
# the sessions it started (forgotten again when its transaction rolls back).
CALLER: ContextVar[Caller | None] = ContextVar("mnemo_caller", default=None)
BOUND_DB: ContextVar[AsyncClient | None] = ContextVar("mnemo_bound_db", default=None)
NEW_SESSIONS: ContextVar[list | None] = ContextVar("mnemo_new_sessions", default=None)
INT32, INT64 = 2**31 - 1, 2**63 - 1  # the SQL API's integer ranges
DB_DOWN = (PoolTimeout, psycopg.OperationalError, psycopg.InterfaceError)


class Failure(ToolError):
    """A tool's error with its project code, message and hint: the HTTP API answers
    them as fields; MCP shows the text "[code] message\nHINT: hint"."""

    def __init__(self, code: str, message: str, hint: str | None = None, status: int | None = None):
        super().__init__(f"[{code}] {message}" + (f"\nHINT: {hint}" if hint else ""))
        self.code, self.message, self.hint, self.status = code, message, hint, status


def argument_errors(e: ValidationError) -> Failure:
    """MN001 naming each bad argument and what is wrong with it (no pydantic URL)."""
    parts = []
    for err in e.errors(include_url=False):
        loc = ".".join(str(x) for x in err.get("loc") or ()) or "arguments"
        parts.append(f"{loc}: {err.get('msg', 'invalid').lower()}")
    return Failure("MN001", "invalid arguments: " + "; ".join(parts),
                   "The tool's input schema lists each argument and its type.")

TenantArg = Annotated[str | None, Field(description="tenant (default: the server's)")]
SessionArg = Annotated[str | None, Field(description="session id, a UUID (default: the server's)")]
AgentArg = Annotated[str | None, Field(description="agent id (default: the server's)")]
ChannelArg = Annotated[str | None, Field(description="private, team, public or agent (default: the server's)")]


@dataclass
class Identity:
    """The server's defaults for the request identity (docs/design.md §Identity)."""

    tenant: str | None = None
    session: str | None = None
    agent: str = "mcp"
    channel: str = "private"


class MemoryTools:
    """The tools. Each method's signature is its tool's input schema."""

    def __init__(self, dsn: str, identity: Identity):
        self.dsn, self.identity = dsn, identity
        self.pool_db: AsyncClient | None = None
        self.sessions: dict[tuple[str, str, str], str] = {}

    @property
    def db(self) -> AsyncClient | None:
        """The request's bound client on a network surface, else the pool's."""
        return BOUND_DB.get() or self.pool_db

    async def open(self) -> None:
        self.pool_db = await connect_async(self.dsn)

    async def close(self) -> None:
        if self.pool_db is not None:
            await self.pool_db.close()

    async def bound(self, caller: Caller, call: Callable[[], Awaitable[Any]]) -> Any:
        """call() for a network request: as `caller`, in one transaction bound to its API
        key (the database refuses any other tenant), all of it rolled back on an error."""
        new: list = []
        tokens = (CALLER.set(caller), NEW_SESSIONS.set(new))
        try:
            async with bound(self.pool_db, caller.key) as db:
                db_token = BOUND_DB.set(db)
                try:
                    return await call()
                finally:
                    BOUND_DB.reset(db_token)
        except BaseException:
            for key in new:  # rolled back with the transaction
                self.sessions.pop(key, None)
            raise
        finally:
            CALLER.reset(tokens[0])
            NEW_SESSIONS.reset(tokens[1])

    async def _sql(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except MnemoError as e:
            raise Failure(e.sqlstate, e.message, e.hint) from e
        except psycopg.DataError as e:  # e.g. a NUL character, which PostgreSQL text cannot hold
            raise Failure("MN001", f"invalid value: {str(e).splitlines()[0]}") from e
        except DB_DOWN as e:
            raise Failure("unavailable", "the database cannot be reached", "Retry shortly.", 503) from e

    def _tenant(self, tenant_id: str | None) -> str:
        caller = CALLER.get()
        if caller is not None:
            try:
                check_tenant(caller, tenant_id, "tenant_id argument")
            except Refused as e:
                raise Failure(e.code, e.message, e.hint, e.status) from None
            return caller.tenant
        tenant = tenant_id or self.identity.tenant
        if not tenant:
            raise Failure("MN001", "tenant_id is required",
                          "Pass tenant_id, or start the server with --tenant (MNEMO_TENANT).")
        return tenant

    @staticmethod
    def _uuid(value: str, what: str = "session_id") -> str:
        try:
            return str(uuid.UUID(str(value)))
        except ValueError:
            raise Failure("MN001", f"{what} {value!r} is not a UUID") from None

    async def _session(self, tenant: str, session_id: str | None, agent_id: str | None,
                       channel: str | None) -> str:
        if session_id:
            return self._uuid(session_id)
        if self.identity.session and tenant == self.identity.tenant:
            return self._uuid(self.identity.session)
        key = (tenant, agent_id or self.identity.agent, channel or self.identity.channel)
        if key not in self.sessions:
            sid = await self._sql(self.db.start_session(
                tenant, agent_id=key[1], channel=key[2], metadata={"source": "mcp"}))
            self.sessions[key] = str(sid)
            new = NEW_SESSIONS.get()
            if new is not None:
                new.append(key)
        return self.sessions[key]

    # ------------------------------------------------------------------- the tools
    async def record_event(
        self,
        kind: Annotated[str, Field(description="message, tool_call, tool_result, decision, task_update or artifact")],
        content: Annotated[dict[str, Any], Field(description="the event, e.g. {\"text\": \"...\"} for a message, "
                                                 "{\"decision\": \"...\", \"rationale\": [...]} for a decision")],
        actor: Annotated[dict[str, Any] | None, Field(
            description="{\"type\": \"human\"|\"agent\"|\"tool\"|\"system\", \"id\": ...} "
                        "(default: this agent)")] = None,
        sensitivity: Annotated[str, Field(description="none, low, high or secret")] = "none",
        tags: list[str] | None = None,
        refs: list[str] | None = None,
        tenant_id: TenantArg = None, session_id: SessionArg = None,
        agent_id: AgentArg = None, channel: ChannelArg = None,
    ) -> dict[str, Any]:
        """Record one event of the conversation (docs/design.md §Surfaces): what was said, a tool
        call or its result, a decision, a task update or an artifact. Returns its
        event_id (and the ids of the rows it wrote)."""
        tenant = self._tenant(tenant_id)
        session = await self._session(tenant, session_id, agent_id, channel)
        actor = actor or {"type": "agent", "id": agent_id or self.identity.agent}
        out = await self._sql(self.db.record_event(tenant, session, kind, content, actor=actor,
                                                   sensitivity=sensitivity, tags=tags, refs=refs))
        return {**out, "session_id": session}

    async def build_acb(
        self,
        query_text: Annotated[str | None, Field(description="what to retrieve for (default: the last user message)")] = None,
        max_tokens: Annotated[int | None, Field(description="token budget (default: the session's window)",
                                                 ge=0, le=INT32)] = None,
        intent: Annotated[str | None, Field(description="e.g. repo_onboarding; continuation, knowledge, "
                                            "new_session or tool_heavy also set the task type")] = None,
        tenant_id: TenantArg = None, session_id: SessionArg = None,
        agent_id: AgentArg = None, channel: ChannelArg = None,
    ) -> dict[str, Any]:
        """Build the Active Context Bundle for the next model call (docs/design.md §Surfaces):
        sections (rules, recent_window, session_summary, retrieved_evidence,
        relevant_decisions) of ready-to-prompt text with their refs, omissions,
        provenance, and the OpenAI messages to send as they are."""
        tenant = self._tenant(tenant_id)
        session = await self._session(tenant, session_id, agent_id, channel)
        return await self._sql(self.db.build_acb(
            tenant, session, query_text, max_tokens=max_tokens, channel=channel or self.identity.channel,
            intent=intent, agent_id=agent_id or self.identity.agent))

    async def get_artifact(
        self,
        artifact_id: Annotated[int, Field(description="the artifact_id of a truncated tool output", ge=1, le=INT64)],
        tenant_id: TenantArg = None,
    ) -> dict[str, Any]:
        """The full bytes of a large tool output that was stored as an excerpt: as text
        when it is UTF-8, else base64."""
        data = await self._sql(self.db.get_artifact(self._tenant(tenant_id), artifact_id))
        try:
            return {"artifact_id": artifact_id, "bytes": len(data), "text": bytes(data).decode("utf-8")}
        except UnicodeDecodeError:
            return {"artifact_id": artifact_id, "bytes": len(data),
                    "base64": base64.b64encode(bytes(data)).decode("ascii")}

    async def query_decisions(
        self,
        query: Annotated[str | None, Field(description="best match first (default: newest first)")] = None,
        limit: Annotated[int, Field(description="at most this many (1 to 200)", ge=1, le=200)] = 20,
        include_superseded: bool = False,
        session_id: Annotated[str | None, Field(description="only this session's decisions")] = None,
        tenant_id: TenantArg = None,
    ) -> dict[str, Any]:
        """Decisions with their rationale, alternatives, constraints and references."""
        options: dict[str, Any] = {"limit": limit, "include_superseded": include_superseded}
        if session_id:
            options["session_id"] = self._uuid(session_id)
        rows = await self._sql(self.db.query_decisions(self._tenant(tenant_id), query, **options))
        return {"decisions": rows}

    async def memory_stats(
        self,
        tenant_id: TenantArg = None,
        session_id: Annotated[str | None, Field(description="one session's (default: the whole tenant)")] = None,
    ) -> dict[str, Any]:
        """What the memory holds: memories per tier and kind with their tokens, messages,
        artifacts, sessions, compiled contexts and the job queue; and paging's figures
        (context reduction, faults, fault rate, micro-faults, tokens saved)."""
        tenant = self._tenant(tenant_id)
        session = self._uuid(session_id) if session_id else None
        stats = await self._sql(self.db.memory_stats(tenant, session))
        return {**stats, "paging": await self._sql(self.db.paging_metrics(tenant, session))}

    async def memory_search(
        self,
        query: Annotated[str, Field(description="what to look for, in words", min_length=1)],
        k: Annotated[int, Field(description="at most this many items (1 to 100)", ge=1, le=100)] = 10,
        kinds: Annotated[list[str] | None, Field(
            description="only these kinds: memory kinds (fact, preference, decision, task, note, ...) "
                        "and message (the recorded history) (default: all)")] = None,
        tenant_id: TenantArg = None,
    ) -> dict[str, Any]:
        """Search everything this tenant's memory holds, across sessions: memories and
        the recorded history, best match first (hybrid: embeddings and full text). Each
        item has its id (mem:N or msg:N, which memory_restore takes), kind, content,
        score, date and session."""
        tenant = self._tenant(tenant_id)
        wanted = set(kinds or [])
        sources = None
        if wanted:
            sources = (["messages"] if wanted == {"message"} else
                       ["memories"] if "message" not in wanted else None)
        rows = await self._sql(self.db.search(tenant, query, limit=min(100, k * 4) if wanted else k,
                                              sources=sources))
        items = []
        for r in rows:
            kind = "message" if r["source"].startswith("msg:") else r["kind"]
            if wanted and kind not in wanted:
                continue
            items.append({"id": r["source"], "kind": kind, "role": r["kind"] if kind == "message" else None,
                          "content": r["content"], "score": round(float(r["score"]), 4),
                          "created_at": r["created_at"].isoformat() if r["created_at"] else None,
                          "session_id": str(r["session_id"]) if r["session_id"] else None})
        return {"items": items[:k]}

    # ------------------------------------------------------------------- paging
    async def memory_query(
        self,
        question: Annotated[str, Field(description="what to find out from content that is no longer in full view")],
        scope: Annotated[str | None, Field(description="object ids (obj:N, space-separated) to answer "
                                           "from alone (default: the whole session)")] = None,
        max_tokens: Annotated[int, Field(description="the answer's length at most (16 to 2000)", ge=16, le=2000)] = 300,
        tenant_id: TenantArg = None, session_id: SessionArg = None,
        agent_id: AgentArg = None, channel: ChannelArg = None,
    ) -> dict[str, Any]:
        """Answer a question from what this session may see beyond its context: its
        paged-out content (stubs, compacted or evicted objects), the tenant's memories
        and its other sessions' history, without restoring anything: an answer and its
        sources (obj:N, mem:N, msg:N)."""
        tenant = self._tenant(tenant_id)
        session = await self._session(tenant, session_id, agent_id, channel)
        return await self._sql(self.db.memory_query(tenant, session, question, scope, max_tokens))

    async def memory_restore(
        self,
        id: Annotated[str, Field(description="the object to bring back: obj:N, msg:N or mem:N")],
        reason: Annotated[str | None, Field(description="why (kept in the fault log)")] = None,
        tenant_id: TenantArg = None, session_id: SessionArg = None,
        agent_id: AgentArg = None, channel: ChannelArg = None,
    ) -> dict[str, Any]:
        """Bring an object back at full fidelity for the next turns (pinned there for a
        while), with its full content."""
        tenant = self._tenant(tenant_id)
        session = await self._session(tenant, session_id, agent_id, channel)
        return await self._sql(self.db.memory_restore(tenant, session, id, reason))

    async def memory_release(
        self,
        ids: Annotated[list[str], Field(description="the objects you are done with: obj:N, msg:N or mem:N")],
        reason: Annotated[str | None, Field(description="why")] = None,
        tenant_id: TenantArg = None, session_id: SessionArg = None,
        agent_id: AgentArg = None, channel: ChannelArg = None,
    ) -> dict[str, Any]:
        """Let objects go: each drops to a one-line stub (evicted when the context is
        under pressure); memory_restore brings it back."""
        tenant = self._tenant(tenant_id)
        session = await self._session(tenant, session_id, agent_id, channel)
        return await self._sql(self.db.memory_release(tenant, session, ids, reason))

    async def memory_objects(
        self,
        limit: Annotated[int, Field(description="the newest this many (1 to 1000)", ge=1, le=1000)] = 200,
        tenant_id: TenantArg = None, session_id: SessionArg = None,
        agent_id: AgentArg = None, channel: ChannelArg = None,
    ) -> dict[str, Any]:
        """The session's semantic objects as paging holds them now: id, kind, label,
        turns, tokens, fidelity (full, detail, compact, stub, evicted), pins; the
        pressure zone and the totals at each fidelity."""
        tenant = self._tenant(tenant_id)
        session = await self._session(tenant, session_id, agent_id, channel)
        return await self._sql(self.db.memory_objects(tenant, session, limit))


# The registry: (tool name, method of MemoryTools). Names match
# ^[a-zA-Z0-9_-]{1,64}$: clients pass them to the model's API, and Anthropic's refuses
# any other (a dot included), so no dotted alias either.
TOOLS: list[tuple[str, str]] = [
    ("memory_record_event", "record_event"),
    ("memory_build_acb", "build_acb"),
    ("memory_get_artifact", "get_artifact"),
    ("memory_query_decisions", "query_decisions"),
    ("memory_stats", "memory_stats"),
    ("memory_search", "memory_search"),
    ("memory_query", "memory_query"),
    ("memory_restore", "memory_restore"),
    ("memory_release", "memory_release"),
    ("memory_objects", "memory_objects"),
]


class Server(MCPServer):
    """The SDK's server, with the tool calls of a network request bound to its caller
    (scope["mnemo.caller"], set by the edge) and argument errors as MN001."""

    def __init__(self, tools: MemoryTools, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.memory_tools = tools

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        request = getattr(getattr(context, "request_context", None), "request", None) if context else None
        caller = getattr(request, "scope", {}).get("mnemo.caller") if request is not None else None
        try:
            if caller is None:
                return await super().call_tool(name, arguments, context)
            return await self.memory_tools.bound(caller, lambda: super(Server, self).call_tool(name, arguments, context))
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                raise argument_errors(e.__cause__) from None
            raise


INSTRUCTIONS = (
    "Long-term memory for this agent: record events as they happen (memory_record_event), "
    "build the context for the next model call (memory_build_acb), fetch a truncated tool "
    "output in full (memory_get_artifact), look up past decisions (memory_query_decisions), "
    "search all of it, across sessions (memory_search); "
    "content paged out of the context: ask it (memory_query), bring it back (memory_restore), "
    "let it go (memory_release), see what is held at which fidelity (memory_objects).")


def build_server(dsn: str, identity: Identity) -> Server:
    tools = MemoryTools(dsn, identity)

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[MemoryTools]:
        await tools.open()
        try:
            yield tools
        finally:
            await tools.close()

    server = Server(tools, "mnemosyne", instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING")
    for name, method in TOOLS:
        server.add_tool(getattr(tools, method), name=name, structured_output=True)
    return server


def http_app(server: Server, *, mode: str = "keys", default_tenant: str | None = None, host: str = "127.0.0.1",
             **limits: Any) -> Any:
    """MCP over streamable HTTP behind the edge (mnemosyne.edge): every request
    authenticated, its body and its tenant's concurrency capped."""
    from .edge import Edge, jsonrpc_error

    app = server.streamable_http_app(host=host)
    tools = server.memory_tools

    async def resolve(key: str) -> str | None:
        if tools.pool_db is None:
            raise Failure("unavailable", "the server is starting")
        return await tools.pool_db.api_key_tenant(key)

    return Edge(json_errors(app), resolve=resolve, error=lambda scope, *a: jsonrpc_error(*a), mode=mode,
                default_tenant=default_tenant, unavailable=(*DB_DOWN, Failure), **limits)


def json_errors(app: Any) -> Any:
    """The SDK's plain-text refusals (a wrong Content-Type or Accept header, an unknown
    session) as JSON-RPC errors, MCP's one error shape."""
    from .edge import jsonrpc_error

    async def wrapped(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        held: dict | None = None

        async def reshape(message: dict) -> None:
            nonlocal held
            if message["type"] == "http.response.start":
                ctype = dict(message.get("headers") or []).get(b"content-type", b"")
                if message["status"] >= 400 and not ctype.startswith(b"application/json"):
                    held = {"status": message["status"], "body": b""}
                    return
            elif held is not None:
                held["body"] += message.get("body", b"")
                if not message.get("more_body"):
                    text = held["body"].decode("utf-8", "replace").strip() or "refused"
                    await jsonrpc_error(held["status"], "MN001", text)(scope, receive, send)
                return
            await send(message)

        await app(scope, receive, reshape)
    return wrapped


def serve(dsn: str, identity: Identity, transport: str = "stdio", host: str = "127.0.0.1",
          port: int = 8765, mode: str = "keys") -> None:
    server = build_server(dsn, identity)
    if transport == "http":
        import uvicorn

        if mode == "local":
            log.warning("mnemo mcp: local single-user mode on %s: requests without an API key act for "
                        "tenant %r", host, identity.tenant)
        uvicorn.run(http_app(server, mode=mode, default_tenant=identity.tenant, host=host),
                    host=host, port=port, log_level="warning")
    else:
        server.run("stdio")
