"""The proxy's calls of the SQL API. Every memory decision is the database's: this
module only opens sessions, syncs histories, compiles, answers memory tool calls and
serves the HTTP API (docs/usage/http-api.md), each through one SQL function.

An agent is never blocked by its memory: when the database cannot be reached (no
connection within Config.db_timeout, or a connection that broke), the call raises
Unavailable and the proxy passes the request through unmanaged; for the next few
seconds calls are bypassed at once instead of waiting again."""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..aio import AsyncClient, Pinned, bound
from ..client import adapt_timestamps
from ..errors import MnemoError

log = logging.getLogger("mnemosyne.proxy")
RETRY_AFTER_S = 3.0  # how long an unreachable database is bypassed without trying


def _reason(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[-1] if text else type(e).__name__


class Unavailable(Exception):
    """The database cannot be reached: the request goes through unmanaged."""


@dataclass
class Identity:
    tenant: str
    session_key: str | None  # X-Mnemo-Session, else derived from the conversation
    agent: str
    channel: str
    key: str | None = None  # the API key the request presented: its database work is bound to it


@dataclass
class Prepared:
    """A managed call: its session, the client's history length as recorded, and the
    compiled messages and phantom tools to send upstream."""
    session_id: uuid.UUID
    positions: int
    messages: list[dict]
    phantom_tools: list[dict]
    report: dict
    timings_ms: dict[str, float]  # open, sync, compile (the Server-Timing header)


def conversation_key(system_prompt: str | None, messages: list[dict]) -> str:
    """A stable session key for a conversation that names no session: its system
    prompt and first user message, which every later call of it resends unchanged."""
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    first = json.dumps(first_user.get("content") if first_user else None, sort_keys=True,
                       ensure_ascii=False)
    digest = hashlib.sha256(f"{system_prompt or ''}\x00{first}".encode()).hexdigest()
    return f"conv:{digest[:32]}"


def split_system(messages: list[dict]) -> tuple[list[dict], str | None]:
    """The leading system and developer messages, and their text (the system prompt)."""
    lead = []
    for m in messages:
        if m.get("role") not in ("system", "developer"):
            break
        lead.append(m)
    texts = []
    for m in lead:
        c = m.get("content")
        texts.append(c if isinstance(c, str) else "\n".join(
            p.get("text", "") for p in c or [] if isinstance(p, dict) and p.get("type") == "text"))
    return lead, ("\n\n".join(t for t in texts if t) or None)


class Memory:
    def __init__(self, dsn: str, pool_size: int = 16, timeout: float = 2.0):
        self.dsn, self.pool_size, self.timeout = dsn, pool_size, timeout
        self.pool: AsyncConnectionPool | None = None
        self.db: AsyncClient | None = None
        self.down_until = 0.0
        self.phantom: bool | None = None  # whether mnemo.handle_tool_call exists
        self._tool_tokens: dict[str, int] = {}

    async def open(self) -> None:
        async def configure(conn: psycopg.AsyncConnection) -> None:
            adapt_timestamps(conn)

        self.pool = AsyncConnectionPool(
            self.dsn, min_size=1, max_size=self.pool_size, open=False, timeout=self.timeout,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self.timeout))},
            configure=configure, reconnect_timeout=24 * 3600)
        await self.pool.open(wait=False)
        self.db = AsyncClient(self.pool)

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    async def _sql(self, awaitable: Any) -> Any:
        """Runs one call of the API; a connection failure becomes Unavailable."""
        if time.monotonic() < self.down_until:
            awaitable.close()
            raise Unavailable("database unreachable (retrying shortly)")
        try:
            return await awaitable
        except (PoolTimeout, psycopg.OperationalError, psycopg.InterfaceError) as e:
            self.down_until = time.monotonic() + RETRY_AFTER_S
            raise Unavailable(_reason(e)) from e

    async def has_phantom_tools(self) -> bool:
        if self.phantom is None:
            self.phantom = bool(await self._sql(self.db._call(
                "SELECT to_regprocedure('mnemo.handle_tool_call(text, uuid, jsonb)') IS NOT NULL", {})))
        return self.phantom

    async def tool_tokens(self, tools: list[dict] | None) -> int:
        """Tokens of the client's own tool definitions (counted once per distinct set)."""
        if not tools:
            return 0
        text = json.dumps(tools, separators=(",", ":"), sort_keys=True)
        key = hashlib.sha256(text.encode()).hexdigest()
        if key not in self._tool_tokens:
            if len(self._tool_tokens) > 256:
                self._tool_tokens.clear()
            self._tool_tokens[key] = await self._sql(self.db.count_tokens(text))
        return self._tool_tokens[key]

    # ------------------------------------------------------------- the proxy's path
    async def prepare(self, ident: Identity, messages: list[dict], *, model: str,
                      context_window: int, response_reserve: int, tools: list[dict] | None,
                      phantom: bool, memory_tokens: int | None = None) -> Prepared:
        """Opens the session, records what is new in the history, compiles the context.
        Raises Unavailable, UnknownTenant, or another MnemoError (the history cannot be
        recorded: the caller passes it through unmanaged)."""
        lead, system_prompt = split_system(messages)
        key = ident.session_key or conversation_key(system_prompt, messages[len(lead):])
        if time.monotonic() < self.down_until:
            raise Unavailable("database unreachable (retrying shortly)")
        options: dict[str, Any] = {"tool_tokens": await self.tool_tokens(tools), "phantom_tools": phantom}
        if memory_tokens is not None:
            options["caps"] = {"memory": memory_tokens}
        try:
            async with self.pool.connection() as conn:
                return await self._prepare(conn, ident, key, system_prompt, messages, model, context_window,
                                           response_reserve, options)
        except (PoolTimeout, psycopg.OperationalError, psycopg.InterfaceError) as e:
            self.down_until = time.monotonic() + RETRY_AFTER_S
            raise Unavailable(_reason(e)) from e

    async def _prepare(self, conn: psycopg.AsyncConnection, ident: Identity, key: str, system_prompt: str | None,
                       messages: list[dict], model: str, context_window: int, response_reserve: int,
                       options: dict[str, Any]) -> Prepared:
        """prepare's three calls, on one connection (one wait for the pool, not three)
        and in one transaction: one commit, one WAL flush (~2.7 ms on the development
        VM's disk) where each call's own commit flushed it again. The compile runs in a
        savepoint: a compile that fails leaves the history recorded, as it would be
        by calls of their own."""
        db = AsyncClient(Pinned(conn))
        clock = time.perf_counter()
        timings: dict[str, float] = {}

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[name] = round((now - clock) * 1000, 2)
            clock = now

        failed: MnemoError | None = None
        async with conn.transaction():
            if ident.key:
                await conn.execute("SELECT set_config('mnemo.api_key', %s, true)", [ident.key])
            session_id = await db.open_session(
                ident.tenant, key, agent_id=ident.agent, channel=ident.channel, model=model or "unknown",
                context_window=context_window,
                response_reserve=min(response_reserve, max(context_window - 256, 0)),
                system_prompt=system_prompt, metadata={"source": "proxy"})
            lap("open")
            synced = await db.sync_messages(ident.tenant, session_id, messages, metadata={"source": "proxy"})
            lap("sync")
            try:
                async with conn.transaction():
                    bundle = await db.compile_context_bundle(ident.tenant, session_id, **options)
            except MnemoError as e:
                failed = e
            lap("compile")
        if failed is not None:
            raise failed
        compiled = bundle["messages"]
        # the compile's first message is the session's system prompt: the client's own
        # leading messages go upstream instead, exactly as it sent them
        if system_prompt and compiled and compiled[0].get("role") == "system" \
                and compiled[0].get("content") == system_prompt:
            compiled = compiled[1:]
        return Prepared(session_id, synced["positions"], compiled, bundle.get("tools") or [],
                        bundle.get("report") or {}, timings)

    async def bound_call(self, key: str | None, call: Callable[[AsyncClient], Awaitable[Any]]) -> Any:
        """call(db) in one transaction bound to the request's API key (AsyncClient.bound);
        a connection failure becomes Unavailable."""
        if time.monotonic() < self.down_until:
            raise Unavailable("database unreachable (retrying shortly)")
        try:
            async with bound(self.db, key) as db:
                return await call(db)
        except (PoolTimeout, psycopg.OperationalError, psycopg.InterfaceError) as e:
            self.down_until = time.monotonic() + RETRY_AFTER_S
            raise Unavailable(_reason(e)) from e

    async def record_reply(self, tenant: str, session_id: uuid.UUID, position: int, reply: dict,
                           metadata: dict, key: str | None = None) -> None:
        """Records the model's reply at the position after the request's history; a
        failure is logged (the client has its answer already)."""
        if not reply.get("content") and not reply.get("tool_calls") and not reply.get("refusal"):
            return
        try:
            await self.bound_call(key, lambda db: db.sync_messages(
                tenant, session_id, [reply], offset=position, metadata={"source": "proxy", **metadata}))
        except (Unavailable, MnemoError) as e:
            log.warning("mnemo proxy: reply of session %s not recorded: %s", session_id, e)

    async def handle_tool_call(self, tenant: str, session_id: uuid.UUID, call: dict,
                               key: str | None = None) -> dict:
        """The answer to a phantom (memory) tool call, as an OpenAI tool message. An
        error becomes the answer's text, so the model can go on."""
        try:
            return await self.bound_call(key, lambda db: db._call(
                "SELECT mnemo.handle_tool_call(%(t)s, %(s)s, %(c)s)",
                {"t": tenant, "s": session_id, "c": Jsonb(call)}))
        except (Unavailable, MnemoError) as e:
            return {"role": "tool", "tool_call_id": call.get("id"), "content": f"memory unavailable: {e}"}
