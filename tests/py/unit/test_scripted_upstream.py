"""The scripted provider's time to first token (Reply.first_delay): a stream waits it
once, before its first piece, as a model's prefill does, and a whole answer waits it
too. bench/proxy.py's fake model relies on it. A real server on 127.0.0.1, no database."""

import json
import time

import httpx2
import pytest

from mnemosyne.proxy.scripted import Reply, ScriptedUpstream, ServerThread

FIRST = 0.4  # seconds: long beside a local round trip, short for a test


@pytest.fixture(scope="module")
def upstream():
    up = ScriptedUpstream()
    server = ServerThread(up.app).start()
    up.url = server.url
    yield up
    server.stop()


def stream_times(url: str, body: dict) -> tuple[float, float, list[str]]:
    """Seconds to the first SSE data line and to the end, and the data lines."""
    start, first, lines = time.monotonic(), None, []
    with httpx2.stream("POST", url, json=body, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                first = first if first is not None else time.monotonic() - start
                lines.append(line[6:])
    return first, time.monotonic() - start, lines


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_stream_waits_first_delay_once_before_its_first_piece(upstream, path):
    upstream.push(Reply(text="one two three four five six", pieces=6, first_delay=FIRST))
    body = {"model": "m", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    first, total, lines = stream_times(upstream.url + path, body)
    assert first >= FIRST
    assert total - first < FIRST  # the rest is not held back: the wait comes once
    text = ""
    for data in lines:
        if data == "[DONE]":
            continue
        event = json.loads(data)
        text += "".join((c.get("delta") or {}).get("content") or "" for c in event.get("choices") or [])
        text += (event.get("delta") or {}).get("text") or ""
    assert text == "one two three four five six"


def test_pieces_follow_the_first_one_at_their_delay(upstream):
    upstream.push(Reply(text="a b c d e f g h i j", pieces=10, delay=0.05, first_delay=FIRST))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    first, total, _ = stream_times(upstream.url + "/v1/chat/completions", body)
    assert first >= FIRST + 0.05  # the first piece waits both
    assert total - first >= 0.05 * 10  # role chunk + 10 pieces + finish + [DONE]: 13 pieces, 12 after the first


def test_without_first_delay_the_first_piece_comes_at_once(upstream):
    upstream.push(Reply(text="quick", pieces=1))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    first, _, _ = stream_times(upstream.url + "/v1/chat/completions", body)
    assert first < FIRST


def test_a_whole_answer_waits_first_delay(upstream):
    upstream.push(Reply(text="whole", first_delay=FIRST))
    start = time.monotonic()
    r = httpx2.post(upstream.url + "/v1/chat/completions", timeout=30,
                    json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "whole"
    assert time.monotonic() - start >= FIRST
