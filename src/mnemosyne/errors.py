"""Exception classes for the project's SQLSTATEs (class MN, see sql/error_codes.sql).

psycopg raises ``psycopg.Error`` with ``sqlstate``; :func:`translate` turns one with
a project code into the matching subclass of :class:`MnemoError`, keeping the
server's message, detail and hint.
"""

from __future__ import annotations

import psycopg


class MnemoError(Exception):
    """An error raised by Mnemosyne's SQL API."""

    sqlstate = "MN000"

    def __init__(self, message: str, detail: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message, self.detail, self.hint = message, detail, hint

    def __str__(self) -> str:
        extra = "".join(f"\n{k}: {v}" for k, v in (("DETAIL", self.detail), ("HINT", self.hint)) if v)
        return f"[{self.sqlstate}] {self.message}{extra}"


class InvalidParameter(MnemoError):
    sqlstate = "MN001"


class UnknownTenant(MnemoError):
    sqlstate = "MN002"


class UnknownSession(MnemoError):
    sqlstate = "MN003"


class InvalidMessage(MnemoError):
    sqlstate = "MN004"


class UnknownRole(InvalidMessage):
    sqlstate = "MN005"


class UnknownToolCall(InvalidMessage):
    sqlstate = "MN006"


class ContentTooLarge(MnemoError):
    sqlstate = "MN007"


class TenantAccessDenied(MnemoError):
    sqlstate = "MN008"


class SessionNotActive(MnemoError):
    sqlstate = "MN009"


class NotFound(MnemoError):
    sqlstate = "MN010"


class ConfigurationError(MnemoError):
    sqlstate = "MN011"


class Duplicate(MnemoError):
    sqlstate = "MN012"


class TooManyRequests(MnemoError):
    sqlstate = "MN013"


class AuthenticationRequired(MnemoError):
    sqlstate = "MN014"


BY_SQLSTATE: dict[str, type[MnemoError]] = {
    cls.sqlstate: cls
    for cls in (
        InvalidParameter, UnknownTenant, UnknownSession, InvalidMessage, UnknownRole,
        UnknownToolCall, ContentTooLarge, TenantAccessDenied, SessionNotActive, NotFound,
        ConfigurationError, Duplicate, TooManyRequests, AuthenticationRequired,
    )
}


def translate(exc: psycopg.Error) -> Exception:
    """The MnemoError for a psycopg error with a project SQLSTATE, else the error itself."""
    cls = BY_SQLSTATE.get(exc.sqlstate or "")
    if cls is None:
        return exc
    diag = exc.diag
    return cls(diag.message_primary or str(exc), diag.message_detail, diag.message_hint)
