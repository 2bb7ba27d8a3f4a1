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
