"""Redaction of what a scanner reading whole messages sees (issue 46): a secret split
across two values of a message, a key in a URL's query string or in base64."""

from __future__ import annotations

import base64
import json

import pytest
from mnemo_db import redact

KEY = "sk-proj-Zt9xQ2mV7rL4pK8wB3nF6hJ1sD5gA0cE9x"
UNKNOWN_VENDOR = "Q7vK2mX9pL4rT8wB3nF6hJ1sD5gA0cEyU"


def _tool_call(arguments: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "login", "arguments": json.dumps(arguments)}}]}


@pytest.mark.parametrize("cut", [12, 24, 30])
def test_a_key_split_across_two_tool_call_arguments_is_redacted_whole(cut):
    message = _tool_call({"host": "db.internal", "key_start": KEY[:cut], "key_end": KEY[cut:], "retry": 3})
    out, kinds = redact.redact_value({"m": message})
    text = json.dumps(out)
    assert KEY[:cut] not in text and KEY[cut:] not in text
    assert kinds == ["openai_key"]
    args = json.loads(out["m"]["tool_calls"][0]["function"]["arguments"])
    assert args["host"] == "db.internal" and args["retry"] == 3


def test_a_key_across_two_content_parts_is_redacted_whole():
    message = {"role": "user", "content": [{"type": "text", "text": "my key is " + KEY[:20]},
                                           {"type": "text", "text": KEY[20:] + " - keep it safe"}]}
    out, _ = redact.redact_value(message)
    parts = [p["text"] for p in out["content"]]
    assert parts == ["my key is [REDACTED:openai_key]", "[REDACTED:openai_key] - keep it safe"]


def test_an_unknown_vendors_key_split_in_two_is_found_by_its_entropy():
    out, kinds = redact.redact_value({"a": UNKNOWN_VENDOR[:16], "b": UNKNOWN_VENDOR[16:]})
    assert UNKNOWN_VENDOR[16:] not in json.dumps(out) and kinds == ["high_entropy"]


@pytest.mark.parametrize("doc", [
    {"key": KEY, "name": "bob", "note": "see you tomorrow"},  # a word after a key is a word
    {"a": "release-2024", "b": "build-2025"},  # two ordinary values with digits
    {"id": "call_abc123", "type": "function", "name": "ls"},
])
def test_values_next_to_each_other_are_not_joined_without_cause(doc):
    out, _ = redact.redact_value(doc)
    for k, v in doc.items():
        if v != KEY:
            assert out[k] == v


@pytest.mark.parametrize("url, secret", [
    ("https://maps.example.com/api?key=AIzb8Xq2mV7rL4pK8w&format=json", "AIzb8Xq2mV7rL4pK8w"),
    ("GET /v1/items?page=2&access_token=q2mV7rL4pK8wB3n HTTP/1.1", "q2mV7rL4pK8wB3n"),
    ("https://bucket.s3.amazonaws.com/o?X-Amz-Signature=0f9e8d7c6b5a4f3e2d1c&X-Amz-Date=1", "0f9e8d7c6b5a4f3e2d1c"),
    ("wss://stream.example.com/socket?client_secret=hunter2pass", "hunter2pass"),
])
def test_a_credential_in_a_urls_query_string_is_redacted(url, secret):
    out, kinds = redact.redact(url)
    assert secret not in out and kinds == ["url_query_secret"]


def test_an_ordinary_query_string_is_kept():
    url = "https://example.com/search?q=postgres+memory&page=2&sort=asc&lang=en"
    assert redact.redact(url) == (url, [])


def test_base64_of_a_key_is_redacted():
    out, kinds = redact.redact("the blob: " + base64.b64encode(KEY.encode()).decode())
    assert kinds == ["base64_openai_key"] and "REDACTED" in out


def test_the_rest_of_a_key_without_digits_is_still_joined():
    key = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k" + "LmNoPqRsTuVwXyZaBcD"  # the second half: letters only
    out, _ = redact.redact_value({"a": key[:25], "b": key[25:]})
    assert out == {"a": "[REDACTED:github_token]", "b": "[REDACTED:github_token]"}
    kept = {"a": key, "b": "Tuesday", "c": "Hello world"}
    assert redact.redact_value(kept)[0] == {"a": "[REDACTED:github_token]", "b": "Tuesday", "c": "Hello world"}


def test_base64_of_a_key_followed_by_a_line_of_text_is_redacted():
    """Without padding, a blob and a word on the next line read as one wrapped run,
    which did not decode as a whole: the key went through (1 blob in 3 had no '=')."""
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + "A" * 40 + "\n-----END PRIVATE KEY-----\n"
    pem += " " * (-len(pem) % 3)  # no padding
    blob = base64.b64encode(pem.encode()).decode()
    assert not blob.endswith("=")
    out, kinds = redact.redact(f"key blob {blob}\nexport done")
    assert blob not in out and out.endswith("\nexport done") and kinds == ["base64_private_key"]


def test_the_write_paths_json_entry_sees_a_split_key():
    """redact_json_text skips documents that cannot hold a secret: two halves of an
    unknown vendor's key, neither long nor prefixed, must not look like one."""
    call = _tool_call({"k1": UNKNOWN_VENDOR[:16], "k2": UNKNOWN_VENDOR[16:]})
    out = json.loads(redact.redact_json_text(json.dumps({"m": call})))
    assert out["kinds"] == ["high_entropy"] and UNKNOWN_VENDOR[16:] not in json.dumps(out)


def test_base64_of_words_is_kept_and_a_lone_encoded_credential_is_not():
    """A test file's base64 sample ("Hello World! This is base64") is text, not a key:
    redacting it changed a file the agent re-read (bench-replay faults). An encoded
    credential without spaces, and one in words that name it, are still redacted."""
    sample = 'sample = "SGVsbG8gV29ybGQhIFRoaXMgaXMgYmFzZTY0"'
    assert redact.redact(sample) == (sample, [])
    lone = base64.b64encode(b"my-very-secret-pass-123456-xyz").decode()
    assert redact.redact(f"blob {lone}")[1] == ["high_entropy"]
    named = base64.b64encode(b"the password is hunter2-prod-9x").decode()
    assert redact.redact(f"blob {named}")[1] == ["base64_password"]


def _planted_texts() -> list[str]:
    """Secrets of every kind bench-trust plants, bare, glued and in prose/code/JSON."""
    import random
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from bench.trust import secrets as planted

    texts = []
    for seed in range(5):
        rng = random.Random(seed)
        for make in planted.TOKENS.values():
            tok = make(rng)
            texts += [tok, "x_" + tok, f"my key is {tok} ok", f'{{"password": "{tok}"}}', f"token = {tok}",
                      f"AWS secret {tok}", f"PASSWORD: {tok}", f"https://u:{tok}@h/x?api_key={tok}"]
        texts += [p[0] for p in planted.prose(rng)]
    a = "Zt9xQ2mV7rL4pK8wB3nF6hJ1sD5gA0cE9xQ2mV7rL4pK8wB3nF6hJ1sD5gA0cE9xQ2mV7rL4pK8wB3n"
    low = a.lower()
    texts += [  # the formats bench-trust does not plant
        "-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY-----",
        "PuTTY-User-Key-File-2: ssh-rsa\nPrivate-MAC: 0a1b", f"https://hooks.slack.com/services/T{a[:8]}/B{a[:8]}/{a[:24]}",
        f"ya29.{a[:30]}", f"npm_{a[:36]}", f"//registry.npmjs.org/:_authToken={a[:20]}", f"pypi-AgE{a[:72]}",
        f"sq0csp-{a[:43]}", f"AC{low[:32]}", f"{low[:32]}-us12", f"123456789:{a[:35]}",
        f"M{a[:23]}.{a[:6]}.{a[:27]}", f"AccountKey={a[:64]}", f"AKC{a[:12]} ", f"Authorization: Bearer {a[:30]}",
        f"Basic {a[:24]}", f"the password for prod is Xy7!{a[:8]}"]
    return texts


def test_each_pattern_is_skipped_only_where_it_cannot_match():
    """The words each pattern needs (redact._NEEDS) are in every text it matches, and
    the fast pre-checks say what the regexes they replace say: skipping is free."""
    texts = _planted_texts()
    matched = set()
    for text in texts:
        assert redact._quick(text) == (redact._QUICK.search(text) is not None), text
        doc = json.dumps({"m": {"role": "user", "content": text}})
        assert redact._quick_json(doc) == (redact._QUICK_JSON.search(doc) is not None), doc
        low = text.lower()
        for i, ((kind, pattern, *_), needs) in enumerate(zip(redact._PATTERNS, redact._NEEDS, strict=True)):
            if pattern.search(text):
                matched.add(i)
                assert needs is None or any(w in low for w in needs), (kind, text)
    assert matched == set(range(len(redact._PATTERNS)))  # the samples reach every pattern


@pytest.mark.parametrize("placeholder", ["password", "Password", "<pass>", "{pwd}", "****", "xxxx",
                                         "${DB_PASSWORD}", "$PGPASS"])
def test_a_url_password_that_only_names_itself_is_kept(placeholder):
    """Docs and code write "user:password@host": a placeholder, not a secret (redacting
    it changed redact.py's own lines when an agent re-read them). A real password, and
    one that merely starts with "$", are still redacted."""
    text = f"postgres://user:{placeholder}@db.internal:5432/app"
    assert redact.redact(text) == (text, [])
    for secret in ("passw0rd", "hunter2-prod", "$ecret123", "Xy7pq2mz9"):
        assert redact.redact(f"postgres://user:{secret}@db.internal/app")[1] == ["url_password"], secret


def test_a_tool_call_id_is_never_half_of_a_split_secret():
    """A tool output ending in a credential-shaped name, then its tool_call_id: joined,
    they looked random enough to be a split key, the id was redacted and the result no
    longer named its call (record_message failed with MN006)."""
    result = {"role": "tool", "content": "TypeInfo(\n    typemod=CharTypeModifier", "tool_call_id": "call_00267"}
    call = {"role": "assistant", "content": "x typemod=CharTypeModifier", "tool_calls": [
        {"id": "call_00267", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
    for message in (result, call):
        out = json.loads(redact.redact_json_text(json.dumps({"m": message})))
        assert out.get("value", {"m": message})["m"] == message


def test_a_type_annotation_is_kept_and_a_passphrase_after_the_keyword_is_not():
    """`token: EventLoopToken | None` (anyio's source, re-read by an agent) names a
    type; the same CamelCase letters ending a line are a value."""
    line = "    token: EventLoopToken | None = None"
    assert redact.redact(line) == (line, [])
    assert redact.redact("secret: CorrectHorseBatteryStaple") == ("secret: [REDACTED:secret]", ["secret"])
