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
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from .aio import AsyncClient, connect_async
from .errors import MnemoError

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
        self.db: AsyncClient | None = None
        self.sessions: dict[tuple[str, str, str], str] = {}

    async def open(self) -> None:
        self.db = await connect_async(self.dsn)

    async def close(self) -> None:
        if self.db is not None:
            await self.db.close()

    async def _sql(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except MnemoError as e:
            raise ToolError(str(e)) from e

    def _tenant(self, tenant_id: str | None) -> str:
        tenant = tenant_id or self.identity.tenant
        if not tenant:
            raise ToolError("[MN001] tenant_id is required\nHINT: pass tenant_id, or start the server "
                            "with --tenant (MNEMO_TENANT).")
        return tenant

    @staticmethod
    def _uuid(value: str, what: str = "session_id") -> str:
        try:
            return str(uuid.UUID(value))
        except ValueError:
            raise ToolError(f"[MN001] {what} {value!r} is not a UUID") from None

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
        max_tokens: Annotated[int | None, Field(description="token budget (default: the session's window)")] = None,
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
        artifact_id: Annotated[int, Field(description="the artifact_id of a truncated tool output")],
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
        limit: Annotated[int, Field(description="at most this many (1 to 200)")] = 20,
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

    # ------------------------------------------------------------------- paging
    async def memory_query(
        self,
        question: Annotated[str, Field(description="what to find out from content that is no longer in full view")],
        scope: Annotated[str | None, Field(description="object ids (obj:N, space-separated) to answer "
                                           "from alone (default: the whole session)")] = None,
        max_tokens: Annotated[int, Field(description="the answer's length at most (16 to 2000)")] = 300,
        tenant_id: TenantArg = None, session_id: SessionArg = None,
        agent_id: AgentArg = None, channel: ChannelArg = None,
    ) -> dict[str, Any]:
        """Answer a question from the session's paged-out content (stubs, compacted or
        evicted objects) without restoring it: an extractive answer and its sources."""
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
        limit: Annotated[int, Field(description="the newest this many (1 to 1000)")] = 200,
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
    ("memory_query", "memory_query"),
    ("memory_restore", "memory_restore"),
    ("memory_release", "memory_release"),
    ("memory_objects", "memory_objects"),
]


def build_server(dsn: str, identity: Identity) -> MCPServer:
    tools = MemoryTools(dsn, identity)

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[MemoryTools]:
        await tools.open()
        try:
            yield tools
        finally:
            await tools.close()

    server = MCPServer("mnemosyne", instructions=(
        "Long-term memory for this agent: record events as they happen (memory_record_event), "
        "build the context for the next model call (memory_build_acb), fetch a truncated tool "
        "output in full (memory_get_artifact), look up past decisions (memory_query_decisions); "
        "content paged out of the context: ask it (memory_query), bring it back (memory_restore), "
        "let it go (memory_release), see what is held at which fidelity (memory_objects)."),
        lifespan=lifespan, log_level="WARNING")
    for name, method in TOOLS:
        server.add_tool(getattr(tools, method), name=name, structured_output=True)
    return server


def serve(dsn: str, identity: Identity, transport: str = "stdio", host: str = "127.0.0.1",
          port: int = 8765) -> None:
    server = build_server(dsn, identity)
    if transport == "http":
        server.run("streamable-http", host=host, port=port)
    else:
        server.run("stdio")
