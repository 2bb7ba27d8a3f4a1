"""compile_context's p_options: read from JSON and checked once, here; a bad value
is an OptionError, which the compile raises as MN001."""

from __future__ import annotations

import json

from .policy import (
    BUDGET_SPLIT,
    CHANNEL_SENSITIVITY,
    DEFAULT_MEMORY_CAP,
    DEFAULT_RECALL_SCOPE,
    RECALL_SCOPES,
    TASK_TYPES,
)

OPTION_KEYS = {"budget", "task_type", "channel", "caps", "as_of", "phantom_tools",
               "tool_tokens", "max_items", "log", "recall_scope"}
CAP_KEYS = {"memory", "history", "items"}


class OptionError(ValueError):
    """A bad p_options value (raised as MN001 by the SQL function), with a hint."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


def options_object(options_json: str | None) -> dict:
    """p_options as a dict (no options: empty); anything but a JSON object is an error."""
    try:
        raw = json.loads(options_json) if options_json else {}
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        raise OptionError("options must be a JSON object", hint='e.g. {"budget": 2000}')
    return raw


def as_of_text(raw: dict) -> str | None:
    """The as_of option's text, if given (the database reads it as a timestamp)."""
    as_of = raw.get("as_of")
    if as_of is not None and not isinstance(as_of, str):
        raise OptionError("option as_of must be a timestamp string")
    return as_of


def _shown(value, limit: int = 40) -> str:
    """A caller's value as an error message quotes it: its repr, cut (a 309-digit
    number or a megabyte string is not echoed back)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _int_option(opts: dict, key: str, lo: int, hi: int) -> int | None:
    v = opts.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise OptionError(f"option {key} must be an integer between {lo} and {hi}, got {_shown(v)}")
    return v


def tenant_memory_cap(config_value: str | None) -> int | None:
    """The memory block's cap without a budget (policy.DEFAULT_MEMORY_CAP) under a
    tenant's config->'memory_cap' as JSON text: absent, the default; null, none; a
    non-negative integer, that. Any other value (written to the table directly:
    create_tenant refuses it) is ignored, as weights_for ignores a bad weight."""
    if config_value is None:
        return DEFAULT_MEMORY_CAP
    try:
        v = json.loads(config_value)
    except ValueError:
        return DEFAULT_MEMORY_CAP
    if v is None:
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else DEFAULT_MEMORY_CAP


def parse_options(opts: dict, session_channel: str, tenant_scope: str | None = None,
                  memory_cap: int | None = DEFAULT_MEMORY_CAP) -> dict:
    """An options_object's values, checked, with their defaults (the channel: the
    session's; the recall scope: the tenant's, tenant_scope, if it names one; the
    memory block's cap when the call names no budget: the tenant's, memory_cap,
    tenant_memory_cap). as_of is checked apart (as_of_text, then by the database)."""
    unknown = sorted(set(opts) - OPTION_KEYS)
    if unknown:
        raise OptionError(f"unknown option {_shown(unknown[0])}; known: {', '.join(sorted(OPTION_KEYS))}")
    task = opts.get("task_type")
    if task is not None and (not isinstance(task, str) or task not in BUDGET_SPLIT):
        raise OptionError(f"task_type must be one of {', '.join(TASK_TYPES)}, got {_shown(task)}")
    channel = opts.get("channel") or session_channel
    if not isinstance(channel, str) or channel not in CHANNEL_SENSITIVITY:
        raise OptionError(f"channel must be one of {', '.join(CHANNEL_SENSITIVITY)}, got {_shown(channel)}")
    caps = opts.get("caps") or {}
    if not isinstance(caps, dict) or set(caps) - CAP_KEYS:
        raise OptionError(f"caps must be an object with keys among {', '.join(sorted(CAP_KEYS))}")
    phantom = opts.get("phantom_tools", True)
    if not isinstance(phantom, bool):
        raise OptionError("option phantom_tools must be true or false")
    log = opts.get("log", True)
    if not isinstance(log, bool):
        raise OptionError("option log must be true or false")
    scope = opts.get("recall_scope")
    if scope is None:  # the tenant's (a config written to the table directly may name none)
        scope = tenant_scope if tenant_scope in RECALL_SCOPES else DEFAULT_RECALL_SCOPE
    elif not isinstance(scope, str) or scope not in RECALL_SCOPES:
        raise OptionError(f"recall_scope must be one of {', '.join(RECALL_SCOPES)}, got {_shown(scope)}")
    return {
        "budget": _int_option(opts, "budget", 0, 10_000_000),
        "task_type": task,
        "channel": channel,
        "cap_memory": _int_option(caps, "memory", 0, 10_000_000),
        "cap_history": _int_option(caps, "history", 0, 10_000_000),
        "max_items": _int_option(caps, "items", 0, 10_000) if "items" in caps
        else _int_option(opts, "max_items", 0, 10_000),
        "phantom_tools": phantom,
        "tool_tokens": _int_option(opts, "tool_tokens", 0, 10_000_000) or 0,
        "log": log,
        "recall_scope": scope,
        "default_memory_cap": memory_cap,
    }
