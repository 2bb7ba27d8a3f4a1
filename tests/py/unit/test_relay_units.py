"""The streamed relay's pass-through of unchanged events (issue 43): an upstream event
the relay would not change reaches the client as the provider's own line, any other
is rewritten as before. The relay reads an in-memory SSE response; no server, no
database (no phantom tool is named, so no memory call is made)."""

import asyncio
import json

import httpx2

from mnemosyne.proxy.relay import AnthropicRelay, Exchange, OpenAIRelay


def exchange() -> Exchange:
    async def no_send(body: dict) -> httpx2.Response:
        raise AssertionError("no continuation is expected")

    return Exchange(memory=None, tenant="t", session_id=None, position=0, phantom_names=set(),
                    body={"model": "m", "messages": []}, send=no_send)


def relayed(relay, lines: list[str]) -> list[bytes]:
    body = "".join(f"{line}\n\n" for line in lines).encode()
    resp = httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body,
                           request=httpx2.Request("POST", "http://upstream/v1/chat/completions"))

    async def collect() -> list[bytes]:
        return [piece async for piece in relay.stream(resp)]

    return asyncio.run(collect())


def chunk(cid: str, delta: dict, finish=None, **extra) -> dict:
    return {"id": cid, "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}


def test_openai_text_deltas_pass_as_sent_and_the_others_are_rewritten():
    role = f"data: {json.dumps(chunk('A', {'role': 'assistant', 'content': ''}))}"
    text = 'data: {"id": "A", "object": "chat.completion.chunk", "created": 1, "model": "m", ' \
           '"choices": [{"index": 0, "delta": {"content": "caf\\u00e9 "}, "logprobs": null, "finish_reason": null}]}'
    other_id = f"data: {json.dumps(chunk('B', {'content': 'ok'}))}"
    no_finish_key = 'data: {"id": "A", "choices": [{"index": 0, "delta": {"content": "!"}}]}'
    with_usage = f"data: {json.dumps(chunk('A', {'content': '?'}, usage={'prompt_tokens': 3}))}"
    last = f"data: {json.dumps(chunk('A', {}, 'stop'))}"
    relay = OpenAIRelay(exchange(), want_usage=False)
    out = relayed(relay, [role, text, other_id, no_finish_key, with_usage, last, "data: [DONE]"])
    assert out[0] == f"{role}\n\n".encode()  # unchanged: the provider's own bytes
    assert out[1] == f"{text}\n\n".encode()  # its escapes included
    events = [json.loads(p.decode()[6:]) for p in out if p != b"data: [DONE]\n\n"]
    # another id: the client keeps seeing the first; no finish_reason key: one is added
    # (null); usage: left out of the delta's chunk (summed for the end)
    assert [e["id"] for e in events] == ["A"] * len(events)
    assert events[2]["choices"][0]["delta"] == {"content": "ok"}
    assert events[3]["choices"][0] == {"index": 0, "delta": {"content": "!"}, "finish_reason": None}
    assert "usage" not in events[4] and events[4]["choices"][0]["delta"] == {"content": "?"}
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert relay.text == "café ok!?"
    assert out[-1] == b"data: [DONE]\n\n"


def test_anthropic_text_deltas_pass_as_sent():
    start = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                   "model": "m", "content": [], "usage": {"input_tokens": 3}}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    delta = 'data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}'
    lines = [f"event: message_start\ndata: {json.dumps(start)}", f"event: content_block_start\ndata: {json.dumps(block)}",
             f"event: content_block_delta\n{delta}",
             'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}',
             ('event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, '
             '"usage": {"output_tokens": 1}}'),
             'event: message_stop\ndata: {"type": "message_stop"}']
    relay = AnthropicRelay(exchange())
    out = relayed(relay, lines)
    assert f"event: content_block_delta\n{delta}\n\n".encode() in out
    kinds = [p.decode().split("\n")[0] for p in out]
    assert kinds == ["event: message_start", "event: content_block_start", "event: content_block_delta",
                     "event: content_block_stop", "event: message_delta", "event: message_stop"]
    assert relay.visible[0]["text"] == "hi"
