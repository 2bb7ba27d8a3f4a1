"""The Mnemosyne client. Each method is one call of a SQL function in schema mnemo.

The methods live in :class:`SqlApi`: each builds its statement and hands it to one of
three primitives (``_call``: the first column of the first row, ``_values``: the
first column of every row, ``_rows``: every row as a dict). :class:`Client` runs them
on a psycopg connection; :class:`mnemosyne.aio.AsyncClient` runs the same methods on
a pool of async connections, so the two cannot drift apart.
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from typing import Any, Self

import psycopg
from psycopg.rows import dict_row
from psycopg.types.datetime import TimestampLoader, TimestamptzLoader
from psycopg.types.json import Jsonb

from .errors import translate


def default_dsn() -> str:
    """DATABASE_URL, else the local cluster that `make up` starts (on MNEMO_PORT)."""
    return os.environ.get("DATABASE_URL") or (
        f"postgresql://postgres@127.0.0.1:{os.environ.get('MNEMO_PORT', '55432')}/mnemo")


def _clamped(data) -> datetime:
    """The datetime nearest to a timestamp a datetime cannot hold (+-infinity, past
    year 9999, BC: PostgreSQL can, and rows from before the API's range check may)."""
    low = bytes(data).startswith(b"-") or bytes(data).endswith(b" BC")
    return datetime.min if low else datetime.max


class _ClampedTimestamptzLoader(TimestamptzLoader):
    """Reads such a timestamp as the nearest one, so one row never fails a listing."""

    def load(self, data):
        try:
            return super().load(data)
        except psycopg.DataError:
            return _clamped(data).replace(tzinfo=UTC)


class _ClampedTimestampLoader(TimestampLoader):
    """As _ClampedTimestamptzLoader, for timestamp without time zone."""

    def load(self, data):
        try:
            return super().load(data)
        except psycopg.DataError:
            return _clamped(data)


def adapt_timestamps(conn: psycopg.Connection | psycopg.AsyncConnection) -> None:
    """Reads every timestamp of the connection's results through the clamped loaders."""
    conn.adapters.register_loader("timestamptz", _ClampedTimestamptzLoader)
    conn.adapters.register_loader("timestamp", _ClampedTimestampLoader)


def connect(dsn: str, **kwargs: Any) -> Client:
    """Open an autocommit connection and wrap it in a Client."""
    return Client(psycopg.connect(dsn, autocommit=True, **kwargs))


def _options(**kw: Any) -> Jsonb:
    """A p_options object of the arguments that were given."""
    return Jsonb({k: v for k, v in kw.items() if v is not None})


class SqlApi:
    """Mnemosyne's SQL API as methods. Subclasses run the statements."""

    def _call(self, sql: str, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _values(self, sql: str, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _rows(self, sql: str, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    # tenants and sessions --------------------------------------------------------
    def create_tenant(self, tenant_id: str, display_name: str | None = None,
                      config: dict | None = None) -> str:
        return self._call(
            "SELECT mnemo.create_tenant(%(t)s, %(n)s, %(c)s)",
            {"t": tenant_id, "n": display_name, "c": Jsonb(config or {})},
        )

    def start_session(self, tenant_id: str, *, agent_id: str = "default",
                      channel: str = "private", model: str = "gpt-4o",
                      context_window: int = 128000, response_reserve: int = 4096,
                      system_prompt: str | None = None, config: dict | None = None,
                      session_id: uuid.UUID | str | None = None,
                      parent_session_id: uuid.UUID | str | None = None,
                      metadata: dict | None = None, started_at: datetime | None = None) -> uuid.UUID:
        """started_at: when the session took place, for a conversation from the past
        (compile_context then takes the session's own time as "now")."""
        return self._call(
            "SELECT mnemo.start_session(p_tenant_id => %(t)s, p_agent_id => %(a)s,"
            " p_channel => %(ch)s, p_model => %(m)s, p_context_window => %(cw)s,"
            " p_response_reserve => %(rr)s, p_system_prompt => %(sp)s, p_config => %(cfg)s,"
            " p_session_id => %(sid)s, p_parent_session_id => %(psid)s, p_metadata => %(md)s,"
            " p_started_at => %(at)s)",
            {"t": tenant_id, "a": agent_id, "ch": channel, "m": model, "cw": context_window,
             "rr": response_reserve, "sp": system_prompt, "cfg": Jsonb(config or {}),
             "sid": session_id, "psid": parent_session_id, "md": Jsonb(metadata or {}),
             "at": started_at},
        )

    def open_session(self, tenant_id: str, session_key: str, *, agent_id: str = "default",
                     channel: str = "private", model: str = "gpt-4o", context_window: int = 128000,
                     response_reserve: int = 4096, system_prompt: str | None = None,
                     metadata: dict | None = None) -> uuid.UUID:
        """The session a stable key stands for, opened on first use (mnemo.open_session)."""
        return self._call(
            "SELECT mnemo.open_session(%(t)s, %(k)s, %(a)s, %(ch)s, %(m)s, %(cw)s, %(rr)s, %(sp)s, %(md)s)",
            {"t": tenant_id, "k": session_key, "a": agent_id, "ch": channel, "m": model,
             "cw": context_window, "rr": response_reserve, "sp": system_prompt,
             "md": Jsonb(metadata or {})},
        )

    # writes ----------------------------------------------------------------------
    def record_message(self, tenant_id: str, session_id: uuid.UUID | str, message: dict, *,
                       sensitivity: str = "none", tags: list[str] | None = None,
                       created_at: datetime | None = None,
                       metadata: dict | None = None) -> int:
        return self._call(
            "SELECT mnemo.record_message(%(t)s, %(s)s, %(m)s, %(sens)s, %(tags)s, %(at)s, %(md)s)",
            {"t": tenant_id, "s": session_id, "m": Jsonb(message), "sens": sensitivity,
             "tags": tags or [], "at": created_at, "md": Jsonb(metadata or {})},
        )

    def record_messages(self, tenant_id: str, session_id: uuid.UUID | str, messages: list[dict], *,
                        sensitivity: str = "none", tags: list[str] | None = None,
                        created_at: list[datetime | None] | None = None,
                        metadata: list[dict] | None = None) -> list[int]:
        """Record several messages in one call, all or nothing: a turn (an assistant
        message and its tool results) or a batch (mnemo.record_messages). created_at
        and metadata, when given, hold one entry per message. Returns the ids in order."""
        return self._call(
            "SELECT mnemo.record_messages(%(t)s, %(s)s, %(m)s::jsonb[], %(sens)s, %(tags)s,"
            " %(at)s::timestamptz[], %(md)s::jsonb[])",
            {"t": tenant_id, "s": session_id, "m": [Jsonb(m) for m in messages], "sens": sensitivity,
             "tags": tags or [], "at": created_at,
             "md": None if metadata is None else [Jsonb(d) for d in metadata]},
        )

    def sync_messages(self, tenant_id: str, session_id: uuid.UUID | str, messages: list[dict], *,
                      offset: int = 0, metadata: dict | None = None) -> dict:
        """Record what is new in a resent history (mnemo.sync_messages)."""
        return self._call(
            "SELECT mnemo.sync_messages(%(t)s, %(s)s, %(m)s, %(o)s, %(md)s)",
            {"t": tenant_id, "s": session_id, "m": Jsonb(messages), "o": offset,
             "md": Jsonb(metadata or {})},
        )

    def record_event(self, tenant_id: str, session_id: uuid.UUID | str, kind: str,
                     content: dict, *, actor: dict | None = None, sensitivity: str = "none",
                     tags: list[str] | None = None, refs: list[str] | None = None,
                     created_at: datetime | None = None) -> dict:
        return self._call(
            "SELECT mnemo.record_event(%(t)s, %(s)s, %(k)s, %(c)s, %(a)s, %(sens)s, %(tags)s,"
            " %(refs)s, %(at)s)",
            {"t": tenant_id, "s": session_id, "k": kind, "c": Jsonb(content),
             "a": Jsonb(actor or {}), "sens": sensitivity, "tags": tags or [],
             "refs": refs or [], "at": created_at},
        )

    # explicit memory API ------------------------------------------------------------
    def remember(self, tenant_id: str, content: str, *, kind: str = "note",
                 session_id: uuid.UUID | str | None = None, options: dict | None = None) -> int:
        """Store a memory directly (idempotent by content hash): mnemo.remember."""
        return self._call(
            "SELECT mnemo.remember(%(t)s, %(c)s, %(k)s, %(s)s, %(o)s)",
            {"t": tenant_id, "c": content, "k": kind, "s": session_id, "o": Jsonb(options or {})},
        )

    def correct(self, tenant_id: str, memory_id: int, content: str, reason: str | None = None) -> int:
        """Supersede a memory with corrected content; returns the new id (mnemo.correct)."""
        return self._call("SELECT mnemo.correct(%(t)s, %(m)s, %(c)s, %(r)s)",
                          {"t": tenant_id, "m": memory_id, "c": content, "r": reason})

    def forget(self, tenant_id: str, memory_id: int | None = None, *, filter: dict | None = None) -> int:
        """Erase a memory or all matching a filter, with what derives from them (mnemo.forget)."""
        return self._call("SELECT mnemo.forget(%(t)s, %(m)s, %(f)s)",
                          {"t": tenant_id, "m": memory_id, "f": Jsonb(filter or {})})

    def query_decisions(self, tenant_id: str, query: str | None = None, **options: Any) -> list[dict]:
        """Decisions with rationale and alternatives, best match first (mnemo.query_decisions)."""
        return self._call("SELECT mnemo.query_decisions(%(t)s, %(q)s, %(o)s)",
                          {"t": tenant_id, "q": query, "o": Jsonb(options)})

    def get_artifact(self, tenant_id: str, artifact_id: int) -> bytes:
        return self._call("SELECT mnemo.get_artifact(%(t)s, %(a)s)",
                          {"t": tenant_id, "a": artifact_id})

    # reads -----------------------------------------------------------------------
    def compile_context(self, tenant_id: str, session_id: uuid.UUID | str,
                        query: str | None = None, **options: Any) -> list[dict]:
        """OpenAI chat messages for the next model call (mnemo.compile_context)."""
        return self._call(
            "SELECT mnemo.compile_context(%(t)s, %(s)s, %(q)s, %(o)s)",
            {"t": tenant_id, "s": session_id, "q": query, "o": Jsonb(options)},
        )

    def compile_context_bundle(self, tenant_id: str, session_id: uuid.UUID | str,
                               query: str | None = None, **options: Any) -> dict:
        """Messages, phantom tools and report (mnemo.compile_context_bundle)."""
        return self._call(
            "SELECT mnemo.compile_context_bundle(%(t)s, %(s)s, %(q)s, %(o)s)",
            {"t": tenant_id, "s": session_id, "q": query, "o": Jsonb(options)},
        )

    def build_acb(self, tenant_id: str, session_id: uuid.UUID | str, query_text: str | None = None,
                  *, max_tokens: int | None = None, channel: str | None = None,
                  intent: str | None = None, agent_id: str | None = None, **options: Any) -> dict:
        """The Active Context Bundle: sections with refs, plus the messages (mnemo.build_acb)."""
        return self._call(
            "SELECT mnemo.build_acb(%(t)s, %(s)s, %(q)s, %(mt)s, %(ch)s, %(i)s, %(a)s, %(o)s)",
            {"t": tenant_id, "s": session_id, "q": query_text, "mt": max_tokens, "ch": channel,
             "i": intent, "a": agent_id, "o": Jsonb(options)})

    # paging: the phantom tools and their metrics -----------------------------------
    def memory_query(self, tenant_id: str, session_id: uuid.UUID | str, question: str,
                     scope: str | None = None, max_tokens: int = 300) -> dict:
        """An answer from the session's paged-out content, nothing restored (mnemo.memory_query)."""
        return self._call("SELECT mnemo.memory_query(%(t)s, %(s)s, %(q)s::text, %(sc)s::text, %(mt)s::integer)",
                          {"t": tenant_id, "s": session_id, "q": question, "sc": scope, "mt": max_tokens})

    def memory_restore(self, tenant_id: str, session_id: uuid.UUID | str, id: str,
                       reason: str | None = None) -> dict:
        """An object (obj:N, msg:N, mem:N) back at full fidelity, pinned (mnemo.memory_restore)."""
        return self._call("SELECT mnemo.memory_restore(%(t)s, %(s)s, %(i)s::text, %(r)s::text)",
                          {"t": tenant_id, "s": session_id, "i": id, "r": reason})

    def memory_release(self, tenant_id: str, session_id: uuid.UUID | str, ids: list[str],
                       reason: str | None = None) -> dict:
        """Objects the model is done with, to stub or evicted (mnemo.memory_release)."""
        return self._call("SELECT mnemo.memory_release(%(t)s, %(s)s, %(i)s::text[], %(r)s::text)",
                          {"t": tenant_id, "s": session_id, "i": ids, "r": reason})

    def handle_tool_call(self, tenant_id: str, session_id: uuid.UUID | str, tool_call: dict) -> dict:
        """The role: tool message answering a phantom tool call (mnemo.handle_tool_call)."""
        return self._call("SELECT mnemo.handle_tool_call(%(t)s, %(s)s, %(c)s)",
                          {"t": tenant_id, "s": session_id, "c": Jsonb(tool_call)})

    def memory_objects(self, tenant_id: str, session_id: uuid.UUID | str, limit: int = 200) -> dict:
        """A session's semantic objects now: fidelity, pins, tokens, sources (mnemo.memory_objects)."""
        return self._call("SELECT mnemo.memory_objects(%(t)s, %(s)s, %(n)s)",
                          {"t": tenant_id, "s": session_id, "n": limit})

    def paging_metrics(self, tenant_id: str, session_id: uuid.UUID | str | None = None,
                       since: datetime | None = None, until: datetime | None = None) -> dict:
        """Context reduction, fault rate, micro-fault success, tokens saved (mnemo.paging_metrics)."""
        return self._call("SELECT mnemo.paging_metrics(%(t)s, %(s)s::uuid, %(a)s::timestamptz, %(b)s::timestamptz)",
                          {"t": tenant_id, "s": session_id, "a": since, "b": until})

    # embeddings and tokens -------------------------------------------------------
    def embed(self, text: str) -> list[float]:
        return self._call("SELECT mnemo.embed(%(x)s)::real[]", {"x": text})

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return self._call(
            "SELECT array_agg(v::real[] ORDER BY i) FROM unnest(mnemo.embed_batch(%(x)s))"
            " WITH ORDINALITY AS e (v, i)", {"x": texts})

    def count_tokens(self, text: str) -> int:
        return self._call("SELECT mnemo.count_tokens(%(x)s)", {"x": text})

    # operations ------------------------------------------------------------------
    def run_jobs(self, batch_size: int = 64, max_batches: int = 100, worker: int = 0) -> None:
        """Run due jobs now (needs the owner role; pg_cron normally does this)."""
        return self._call("CALL mnemo.run_jobs(%(b)s, %(m)s, %(w)s)",
                          {"b": batch_size, "m": max_batches, "w": worker})

    def run_sweep(self, sweep: str, *, now: datetime | None = None, tenant_id: str | None = None,
                  batch_size: int | None = None, max_batches: int = 100000,
                  max_seconds: int = 0) -> None:
        """Run one lifecycle sweep now (mnemo.run_sweep; owner; it commits per batch)."""
        return self._call(
            "CALL mnemo.run_sweep(%(s)s, coalesce(%(n)s, now()), %(t)s, %(b)s, %(mb)s, %(ms)s)",
            {"s": sweep, "n": now, "t": tenant_id, "b": batch_size, "mb": max_batches,
             "ms": max_seconds})

    def lifecycle_status(self) -> list[dict]:
        """Each background job: schedule, last run, duration, rows, counters, last error."""
        return self._rows("SELECT * FROM mnemo.lifecycle_status()", {})

    def set_helper_llm(self, base_url: str | None, model: str | None = None,
                       api_key: str | None = None, *, timeout_s: float = 20, max_retries: int = 2,
                       backoff_s: float = 1, enabled: bool = True,
                       options: dict | None = None) -> None:
        """Configure the helper LLM (None removes it): mnemo.set_helper_llm, owner only."""
        return self._call(
            "SELECT mnemo.set_helper_llm(%(u)s, %(m)s, %(k)s, %(to)s::real, %(r)s::integer,"
            " %(b)s::real, %(e)s, %(o)s)",
            {"u": base_url, "m": model, "k": api_key, "to": timeout_s, "r": max_retries,
             "b": backoff_s, "e": enabled, "o": Jsonb(options or {})})

    def status(self) -> dict:
        """Server, extensions, schema, job queue, sizes per plane, embedding model (admin)."""
        return self._call("SELECT mnemo.status()", {})

    def list_jobs(self, *, status: str | None = None, tenant_id: str | None = None,
                  kind: str | None = None, limit: int | None = None) -> list[dict]:
        """The job queue across tenants, failed jobs first (mnemo.list_jobs, admin)."""
        return self._rows("SELECT * FROM mnemo.list_jobs(%(o)s)",
                          {"o": _options(status=status, tenant_id=tenant_id, kind=kind, limit=limit)})

    def retry_jobs(self, tenant_id: str | None = None, job_ids: list[int] | None = None) -> int:
        """Queue failed jobs again; returns how many (mnemo.retry_jobs, admin)."""
        return self._call("SELECT mnemo.retry_jobs(%(t)s, %(j)s)", {"t": tenant_id, "j": job_ids})

    # API keys --------------------------------------------------------------------
    def create_api_key(self, tenant_id: str, label: str | None = None,
                       expires_at: datetime | None = None) -> dict:
        """A new API key for the tenant; its secret is in the result this once
        (mnemo.create_api_key)."""
        return self._call("SELECT mnemo.create_api_key(%(t)s, %(l)s, %(e)s)",
                          {"t": tenant_id, "l": label, "e": expires_at})

    def list_api_keys(self, tenant_id: str) -> list[dict]:
        """The tenant's API keys and their state, no secrets (mnemo.list_api_keys)."""
        return self._rows("SELECT * FROM mnemo.list_api_keys(%(t)s)", {"t": tenant_id})

    def revoke_api_key(self, tenant_id: str, key_id: str) -> dict:
        """Revokes one of the tenant's API keys (mnemo.revoke_api_key)."""
        return self._call("SELECT mnemo.revoke_api_key(%(t)s, %(k)s)", {"t": tenant_id, "k": key_id})

    def api_key_tenant(self, secret: str) -> str | None:
        """The tenant a presented API key acts for; None when it is unknown, revoked or
        expired (mnemo_internal.api_key_tenant: how a network surface authenticates)."""
        return self._call("SELECT mnemo_internal.api_key_tenant(%(k)s)", {"k": secret})

    # inspection ------------------------------------------------------------------
    def list_tenants(self) -> list[dict]:
        """The tenants the caller can see, with their sizes (mnemo.list_tenants)."""
        return self._rows("SELECT * FROM mnemo.list_tenants()", {})

    def list_sessions(self, tenant_id: str, *, session_id: uuid.UUID | str | None = None,
                      status: str | None = None, agent_id: str | None = None,
                      limit: int | None = None) -> list[dict]:
        """A tenant's sessions with their message counts, newest first (mnemo.list_sessions)."""
        return self._rows(
            "SELECT * FROM mnemo.list_sessions(%(t)s, %(o)s)",
            {"t": tenant_id, "o": _options(session_id=None if session_id is None else str(session_id),
                                           status=status, agent_id=agent_id, limit=limit)})

    def search(self, tenant_id: str, query: str, *, limit: int | None = None,
               sources: list[str] | None = None,
               session_id: uuid.UUID | str | None = None) -> list[dict]:
        """Hybrid search over memories and messages, with scores (mnemo.search)."""
        return self._rows(
            "SELECT * FROM mnemo.search(%(t)s, %(q)s, %(o)s)",
            {"t": tenant_id, "q": query, "o": _options(
                limit=limit, sources=sources, session_id=None if session_id is None else str(session_id))})

    def memory_stats(self, tenant_id: str, session_id: uuid.UUID | str | None = None) -> dict:
        """Counts and sizes of a tenant's (or session's) memory (mnemo.memory_stats)."""
        return self._call("SELECT mnemo.memory_stats(%(t)s, %(s)s)", {"t": tenant_id, "s": session_id})

    def export_tenant(self, tenant_id: str) -> list[dict]:
        """The tenant's sessions, messages and explicit memories as export lines."""
        return self._values("SELECT line FROM mnemo.export_tenant(%(t)s) AS line", {"t": tenant_id})


class Client(SqlApi):
    """The SQL API on one psycopg connection (autocommit: every call is its own
    transaction, and the procedures that commit can run)."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        adapt_timestamps(conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _execute(self, sql: str, params: dict[str, Any], fetch: str) -> Any:
        try:
            with self.conn.cursor(row_factory=dict_row if fetch == "rows" else None) as cur:
                cur.execute(sql, params)
                if cur.description is None:
                    return None
                if fetch == "one":
                    row = cur.fetchone()
                    return row[0] if row else None
                rows = cur.fetchall()
                return rows if fetch == "rows" else [r[0] for r in rows]
        except psycopg.Error as e:
            raise translate(e) from e

    def _call(self, sql: str, params: dict[str, Any]) -> Any:
        return self._execute(sql, params, "one")

    def _values(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return self._execute(sql, params, "values")

    def _rows(self, sql: str, params: dict[str, Any]) -> list[dict]:
        return self._execute(sql, params, "rows")
