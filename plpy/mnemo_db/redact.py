"""Secret redaction on the write path (messages and memories).

Credentials are replaced by `[REDACTED:<kind>]` before anything is stored, so no
table, index, job payload, summary or compiled context ever holds them. Patterns are
deliberately specific (known key formats, credentials in URLs, `password=` pairs,
bearer tokens, PEM private keys): a false positive costs a few words of a message,
a false negative leaks a credential into every derived row.

`redact(text)` returns the new text and the kinds found; `redact_value` walks JSON.
"""

from __future__ import annotations

import json
import re

MARK = "[REDACTED:{}]"
MARKED = re.compile(r"\[REDACTED:(\w+)\]")  # what a redacted text says it lost

# (kind, pattern, group to replace or 0 for the whole match). Order matters: PEM
# blocks and URLs first, then prefixed key formats, then generic key=value pairs.
_PATTERNS: list[tuple[str, re.Pattern, int]] = [
    ("private_key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"), 0),
    # scheme://user:password@host  (connection strings, git remotes, proxies)
    ("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@'\"]+:([^\s@/'\"]+)@"), 1),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}"), 0),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"), 0),
    ("aws_access_key_id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), 0),
    ("aws_secret_access_key", re.compile(
        r"(?i)\baws_?secret_?(?:access_?)?key\b[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})\b"), 1),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"), 0),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"), 0),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"), 0),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), 0),
    ("stripe_key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b"), 0),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    # "Bearer <token>", "Authorization: token <token>": credential-shaped values only
    # (letters and digits), so prose like "token migrations/0042" stays.
    ("bearer_token", re.compile(
        r"(?i)(?:\bbearer|\bauthorization:\s*token)\s+((?=[A-Za-z0-9._~+/-]*\d)(?=[A-Za-z0-9._~+/-]*[A-Za-z])"
        r"[A-Za-z0-9._~+/-]{16,}=*)"), 1),
    ("basic_auth", re.compile(r"(?i)\bbasic\s+([A-Za-z0-9+/]{16,}={0,2})"), 1),
    # password=..., PGPASSWORD=..., "password": "...", pwd: ...
    ("password", re.compile(
        r"(?i)(?:\b|_)(?:password|passwd|passphrase|pwd)[\"']?\s*(?:=|:|\bis\b)\s*"
        r"(\"[^\"\n]{3,}\"|'[^'\n]{3,}'|[^\s;,&'\"]{3,})"), 1),
    ("secret", re.compile(
        r"(?i)\b(?:api[_-]?key|apikey|secret[_-]?key|client[_-]?secret|access[_-]?token|"
        r"auth[_-]?token|secret|token)[\"']?\s*[:=]\s*"
        r"(\"[A-Za-z0-9._~+/=-]{12,}\"|'[A-Za-z0-9._~+/=-]{12,}'|[A-Za-z0-9._~+/=-]{12,})"), 1),
]
_QUICK = re.compile(
    r"(?i)PRIVATE KEY|://[^\s/@]+:[^\s@]+@|sk-|AKIA|ASIA|AGPA|AIDA|AROA|aws|gh[pousr]_|github_pat_"
    r"|glpat-|xox|AIza|_live_|_test_|eyJ|bearer|token|basic|pass|pwd|secret|api.?key")


def redact(text: str | None) -> tuple[str | None, list[str]]:
    """(text with secrets replaced, sorted kinds found)."""
    if not text or not _QUICK.search(text):
        return text, []
    kinds: set[str] = set()
    for kind, pattern, group in _PATTERNS:
        def repl(m: re.Match, kind=kind, group=group) -> str:
            value = m.group(group)
            if not value or value.startswith("[REDACTED"):
                return m.group(0)
            kinds.add(kind)
            if group == 0:
                return MARK.format(kind)
            start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
            whole = m.group(0)
            mark = MARK.format(kind)
            if len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]:
                mark = value[0] + mark + value[0]  # keep quoted JSON/strings well formed
            return whole[:start] + mark + whole[end:]
        text = pattern.sub(repl, text)
    return text, sorted(kinds)


def redact_value(value):
    """Redacts every string inside a JSON value (keys stay). -> (value, kinds)."""
    kinds: set[str] = set()

    def walk(v):
        if isinstance(v, str):
            out, found = redact(v)
            kinds.update(found)
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return walk(value), sorted(kinds)


def redact_json_text(raw: str) -> str:
    """PL/Python entry: a JSON document in, {"value": ..., "kinds": [...]} out (no
    value when nothing was found; the quick pre-check keeps clean writes cheap)."""
    if not _QUICK.search(raw):
        return '{"kinds": []}'
    value, kinds = redact_value(json.loads(raw))
    if not kinds:
        return '{"kinds": []}'
    return json.dumps({"value": value, "kinds": kinds}, ensure_ascii=False)
