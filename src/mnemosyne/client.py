"""The Mnemosyne client. Each method is one call of a SQL function in schema mnemo."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Self

import psycopg
from psycopg.types.json import Jsonb

from .errors import translate


def connect(dsn: str, **kwargs: Any) -> Client:
    """Open an autocommit connection and wrap it in a Client."""
    return Client(psycopg.connect(dsn, autocommit=True, **kwargs))


class Client:
    def __init__(self, conn: psycopg.Connection):
        self.conn = conn

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, sql: str, params: dict[str, Any]) -> Any:
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, params)
                row = cur.fetchone() if cur.description else None
                return row[0] if row else None
        except psycopg.Error as e:
            raise translate(e) from e

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
                      metadata: dict | None = None) -> uuid.UUID:
        return self._call(
            "SELECT mnemo.start_session(p_tenant_id => %(t)s, p_agent_id => %(a)s,"
            " p_channel => %(ch)s, p_model => %(m)s, p_context_window => %(cw)s,"
            " p_response_reserve => %(rr)s, p_system_prompt => %(sp)s, p_config => %(cfg)s,"
            " p_session_id => %(sid)s, p_parent_session_id => %(psid)s, p_metadata => %(md)s)",
            {"t": tenant_id, "a": agent_id, "ch": channel, "m": model, "cw": context_window,
             "rr": response_reserve, "sp": system_prompt, "cfg": Jsonb(config or {}),
             "sid": session_id, "psid": parent_session_id, "md": Jsonb(metadata or {})},
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
        self._call("CALL mnemo.run_jobs(%(b)s, %(m)s, %(w)s)",
                   {"b": batch_size, "m": max_batches, "w": worker})
