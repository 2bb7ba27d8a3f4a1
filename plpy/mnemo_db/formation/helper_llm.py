"""The helper LLM: an OpenAI-compatible chat-completions endpoint (OpenAI, vLLM,
Ollama), called from PL/Python with the standard library's HTTP client only.

`chat_json` posts one request asking for a JSON object and returns it parsed. A
timeout, a connection error, an HTTP 408/429/5xx or a reply that is not the JSON
asked for is retried with exponential backoff (`backoff_s * 2**attempt`); after
`max_retries` retries it raises HelperLLMError and the caller falls back to the
offline implementation. `extract` turns messages into the same candidate dicts as
extract.extract (validated field by field: a malformed item is an error, so the
whole reply is retried rather than half-trusted).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import datetime

from . import extract as offline

KINDS = ("fact", "preference", "instruction", "decision", "task", "open_loop")
SYSTEM = (
    "You extract durable memories from a conversation for an AI agent's long-term memory. "
    "Return only a JSON object {\"memories\": [...]} where each memory is "
    "{\"kind\": one of fact|preference|instruction|decision|task|open_loop, "
    "\"content\": one self-contained sentence in the third person naming who it is about, "
    "\"source\": [the numbers of the messages it comes from], "
    "\"subject\", \"predicate\" (snake_case), \"object\" (facts and preferences), "
    "\"functional\": true when the subject can have only one value of the predicate at a time "
    "(lives_in, works_at, age ...), \"rationale\": [..], \"alternatives\": [..] (decisions), "
    "\"due\": ISO date or null (tasks, open loops), \"entities\": [names of people, places, "
    "projects, files], \"utility\": 0..1 how useful this will be later}. "
    "Skip greetings, acknowledgements and small talk. Never include credentials."
)


class HelperLLMError(Exception):
    """The endpoint did not give a usable answer after all retries. `errors` lists
    what each attempt got; `unreachable` says whether any attempt failed for want of an
    answer (timeout, connection, HTTP error) rather than with a malformed one."""

    def __init__(self, message: str, errors: list[str] | None = None):
        super().__init__(message)
        self.errors = errors or []

    @property
    def unreachable(self) -> bool:
        return any(not e.startswith("malformed reply") for e in self.errors)


class MalformedReply(ValueError):
    """A reply that is not the JSON asked for (retried like a timeout)."""


# The configuration (enabled only) and its key; the key table is readable by the owner only.
CONFIG = """
SELECT h.base_url, h.model, h.timeout_s::float8 AS timeout_s, h.max_retries, h.backoff_s::float8 AS backoff_s,
    h.options::text AS options, k.api_key
FROM mnemo_internal.helper_llm AS h LEFT JOIN mnemo_internal.helper_llm_keys AS k ON k.name = h.name
WHERE h.name = 'default' AND h.enabled
"""


def config_from_rows(rows) -> dict | None:
    """The helper configuration from CONFIG's result, None when none is enabled."""
    if not rows:
        return None
    h = dict(rows[0])
    h["options"] = json.loads(h["options"] or "{}")
    return h


def _post(url: str, body: dict, api_key: str | None, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode("utf-8"))


def _content_json(reply: dict) -> dict:
    content = reply["choices"][0]["message"]["content"]
    if not isinstance(content, str):
        raise MalformedReply("message content is not a string")
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text[text.find("\n") + 1:] if "\n" in text else text
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise MalformedReply("no JSON object in the reply")
    out = json.loads(text[start:end + 1])
    if not isinstance(out, dict):
        raise MalformedReply("the reply is not a JSON object")
    return out


def chat_json(config: dict, api_key: str | None, messages: list[dict],
              validate=None, sleep=time.sleep) -> tuple[dict, int]:
    """(parsed JSON object, attempts used). Retries per the config; raises HelperLLMError."""
    url = config["base_url"].rstrip("/") + "/chat/completions"
    body = {"model": config["model"], "messages": messages, "temperature": 0,
            "response_format": {"type": "json_object"}}
    body.update(config.get("options") or {})
    retries, backoff = int(config.get("max_retries", 2)), float(config.get("backoff_s", 1.0))
    errors: list[str] = []
    for attempt in range(retries + 1):
        if attempt:
            sleep(backoff * 2 ** (attempt - 1))
        try:
            out = _content_json(_post(url, body, api_key, float(config.get("timeout_s", 20))))
            return (validate(out) if validate else out), attempt + 1
        except urllib.error.HTTPError as e:
            errors.append(f"HTTP {e.code}")
            if e.code not in (408, 409, 425, 429) and e.code < 500:
                break  # a client error will not get better by asking again
        except (OSError, TimeoutError) as e:  # URLError, socket timeouts, resets
            errors.append(f"{type(e).__name__}: {e}"[:200])
        except (ValueError, KeyError, IndexError, TypeError) as e:  # malformed replies
            errors.append(f"malformed reply: {e}"[:200])
    raise HelperLLMError("; ".join(errors) or "no attempt made", errors)


def _transcript(messages: list[dict]) -> str:
    lines = []
    for i, m in enumerate(messages, 1):
        when = m["created_at"].strftime("%Y-%m-%d %H:%M") if isinstance(m.get("created_at"), datetime) else ""
        lines.append(f"[{i}] {when} {offline.speaker_of(m)}: {m['content']}")
    return "\n".join(lines)


def _strs(v, name: str) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise MalformedReply(f"{name} must be a list of strings")
    return [offline.clean(x) for x in v if x.strip()]


def to_candidates(reply: dict, messages: list[dict]) -> list[dict]:
    """Validated candidates from a reply; raises ValueError on anything malformed."""
    items = reply.get("memories")
    if not isinstance(items, list):
        raise MalformedReply("'memories' must be a list")
    out = []
    for it in items:
        if not isinstance(it, dict) or it.get("kind") not in KINDS:
            raise MalformedReply(f"bad memory item {str(it)[:80]}")
        content = it.get("content")
        if not isinstance(content, str) or not content.strip():
            raise MalformedReply("a memory needs a content string")
        src = it.get("source") or []
        if not isinstance(src, list) or not src or not all(
                isinstance(i, int) and 1 <= i <= len(messages) for i in src):
            raise MalformedReply("source must list message numbers of the transcript")
        first = messages[min(src) - 1]
        c = offline._cand(it["kind"], content, first, speaker=offline.speaker_of(first))
        c["source_message_ids"] = sorted({messages[i - 1]["message_id"] for i in src})
        c["valid_from"] = max(messages[i - 1].get("created_at") for i in src) or first.get("created_at")
        c["confidence"] = 0.85
        for k in ("subject", "predicate", "object"):
            if isinstance(it.get(k), str) and it[k].strip():
                c[k] = offline.clean(it[k])
        if c.get("predicate"):
            c["predicate"] = c["predicate"].lower().replace(" ", "_")
        c["functional"] = bool(it.get("functional")) and bool(c.get("subject") and c.get("object"))
        if it["kind"] == "decision":
            c["decision"] = c["content"]
            c["rationale"] = _strs(it.get("rationale"), "rationale")
            c["alternatives"] = _strs(it.get("alternatives"), "alternatives")
        if it["kind"] in ("task", "open_loop"):
            c["title"], c["status"] = c["content"], "open"
            if it.get("due"):
                c["due_at"] = datetime.fromisoformat(str(it["due"]))
                if c["due_at"].tzinfo is None and first.get("created_at") is not None:
                    c["due_at"] = c["due_at"].replace(tzinfo=first["created_at"].tzinfo)
        if isinstance(it.get("utility"), (int, float)):
            c["utility"] = float(it["utility"])
        ents = _strs(it.get("entities"), "entities")
        if ents:
            c["entities"] = [(e, "thing") for e in ents[:12]]
        if first["role"] == "user" and it["kind"] == "instruction":
            c["provenance_type"] = "instruction"
        out.append(c)
    return out


def extract(config: dict, api_key: str | None, messages: list[dict], sleep=time.sleep) -> tuple[list[dict], int]:
    """Candidates of the chat turns in `messages` (tool results stay offline)."""
    chat = [m for m in messages if m["role"] in ("user", "assistant") and (m.get("content") or "").strip()]
    if not chat:
        return [], 0
    prompt = [{"role": "system", "content": SYSTEM},
              {"role": "user", "content": "Conversation:\n" + _transcript(chat)}]
    cands, attempts = chat_json(config, api_key, prompt, lambda r: to_candidates(r, chat), sleep)
    for c in cands:
        c["method"] = "helper_llm"
    return cands, attempts
