"""The proxy's configuration: upstreams, who may call, identity defaults (flags of `mnemo serve`
or MNEMO_* environment variables; nothing about a provider is hard-coded but its
public default address)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..edge import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONCURRENT

# Context windows by model name prefix (longest prefix wins); X-Mnemo-Context-Window
# or --context-window overrides them, and a model matching none gets the default.
CONTEXT_WINDOWS = {
    "claude": 200_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
    "gpt-4-turbo": 128_000,
    "gpt-3.5": 16_385,
}
DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_RESPONSE_RESERVE = 4096


@dataclass
class Config:
    dsn: str
    openai_base_url: str = "https://api.openai.com/v1"
    anthropic_base_url: str = "https://api.anthropic.com"
    openai_api_key: str | None = None
    anthropic_api_key: str | None = None
    # who a request acts for (mnemosyne.edge): "keys" (an API key per request, the
    # default), "local" (no key: default_tenant; loopback only) or "gateway" (no key:
    # the X-Mnemo-Tenant header, set by a trusted gateway in front)
    mode: str = "keys"
    default_tenant: str | None = None
    default_agent: str = "proxy"
    default_channel: str = "private"
    context_window: int | None = None  # overrides the table above for every model
    # at most this many tokens of memories per call (the compile's caps.memory; default:
    # the compile's share of the window, e.g. ~18k tokens of a 128k window)
    memory_tokens: int | None = None
    upstream_timeout: float = 600.0
    connect_timeout: float = 10.0
    db_pool_size: int = 8  # the compile is CPU-bound: more backends than cores only queue there
    db_timeout: float = 2.0  # waiting for a database connection; then the call is bypassed
    max_phantom_rounds: int = 4
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # larger bodies: 413
    max_concurrent: int = DEFAULT_MAX_CONCURRENT  # requests in flight per tenant; more: 429

    @classmethod
    def from_env(cls, dsn: str, **overrides: object) -> Config:
        env = os.environ
        values: dict[str, object] = {
            "openai_base_url": env.get("MNEMO_OPENAI_BASE_URL") or cls.openai_base_url,
            "anthropic_base_url": env.get("MNEMO_ANTHROPIC_BASE_URL") or cls.anthropic_base_url,
            "openai_api_key": env.get("MNEMO_OPENAI_API_KEY"),
            "anthropic_api_key": env.get("MNEMO_ANTHROPIC_API_KEY"),
            "default_tenant": env.get("MNEMO_TENANT"),
            "memory_tokens": int(env["MNEMO_MEMORY_TOKENS"]) if env.get("MNEMO_MEMORY_TOKENS") else None,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(dsn=dsn, **values)  # type: ignore[arg-type]

    def window_for(self, model: str | None) -> int:
        if self.context_window:
            return self.context_window
        best = ""
        for prefix in CONTEXT_WINDOWS:
            if (model or "").startswith(prefix) and len(prefix) > len(best):
                best = prefix
        return CONTEXT_WINDOWS.get(best, DEFAULT_CONTEXT_WINDOW)
