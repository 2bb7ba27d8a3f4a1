"""The async twin of :class:`mnemosyne.Client`, for asyncio applications.

It has the same methods (they are :class:`mnemosyne.client.SqlApi`'s, shared with the
sync client) and the same exception mapping; each returns an awaitable and runs on
a connection borrowed from a psycopg_pool pool of autocommit connections::

    async with await connect_async(dsn) as m:
        sid = await m.start_session("acme")
        await m.record_message("acme", sid, {"role": "user", "content": "hi"})
        messages = await m.compile_context("acme", sid)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Self

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from .client import SqlApi, adapt_timestamps
from .errors import translate


async def connect_async(dsn: str, *, min_size: int = 1, max_size: int = 4,
                        **kwargs: Any) -> AsyncClient:
    """Open a pool of autocommit connections and wrap it in an AsyncClient."""
    async def configure(conn: psycopg.AsyncConnection) -> None:
        adapt_timestamps(conn)

    pool = AsyncConnectionPool(dsn, min_size=min_size, max_size=max_size, open=False,
                               kwargs={"autocommit": True, **kwargs}, configure=configure)
    await pool.open(wait=True)
    return AsyncClient(pool)


class Pinned:
    """One pooled connection in the shape of a pool, for an AsyncClient that makes
    several calls on it."""

    def __init__(self, conn: psycopg.AsyncConnection):
        self.conn = conn

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        yield self.conn


class AsyncClient(SqlApi):
    """The SQL API on a pool of async connections (every call is its own transaction)."""

    def __init__(self, pool: AsyncConnectionPool):
        self.pool = pool

    async def close(self) -> None:
        await self.pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _execute(self, sql: str, params: dict[str, Any], fetch: str) -> Any:
        try:
            async with (self.pool.connection() as conn,
                        conn.cursor(row_factory=dict_row if fetch == "rows" else None) as cur):
                await cur.execute(sql, params)
                if cur.description is None:
                    return None
                if fetch == "one":
                    row = await cur.fetchone()
                    return row[0] if row else None
                rows = await cur.fetchall()
                return rows if fetch == "rows" else [r[0] for r in rows]
        except psycopg.Error as e:
            raise translate(e) from e

    def _call(self, sql: str, params: dict[str, Any]) -> Any:
        return self._execute(sql, params, "one")

    def _values(self, sql: str, params: dict[str, Any]) -> Any:
        return self._execute(sql, params, "values")

    def _rows(self, sql: str, params: dict[str, Any]) -> Any:
        return self._execute(sql, params, "rows")


@asynccontextmanager
async def bound(client: AsyncClient, api_key: str | None) -> AsyncIterator[AsyncClient]:
    """An AsyncClient on one connection of `client`'s pool, in one transaction bound to
    the API key a request presented: every API call in it may act only for that key's
    tenant (mnemo_internal.enter_tenant refuses any other with MN008), and an error
    rolls back all of it. With no key, the transaction is not bound (a local
    single-user or trusted-gateway service)."""
    async with client.pool.connection() as conn, conn.transaction():
        if api_key:
            await conn.execute("SELECT set_config('mnemo.api_key', %s, true)", [api_key])
        yield AsyncClient(Pinned(conn))
