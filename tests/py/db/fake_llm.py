"""A local server that speaks the OpenAI chat-completions protocol, for the helper-LLM
tests (formation, summaries). Each server answers with `respond(body, n)` (the request
body and its number): a string is the assistant message's content, None hangs (no
answer within any test's timeout). The `fake_llm` fixture (conftest.py) starts servers
and points mnemo.set_helper_llm at them."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg

MALFORMED = "Sure! Here it is: not json at all"
# A hang outlasts any timeout a test sets (0.3 s): a call that waited for one
# would take this long, so "it timed out" is elapsed < HANG_S, loose on a busy machine.
HANG_S = 30


class FakeLLM(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv.requests.append({"body": body, "auth": self.headers.get("Authorization")})
        content = srv.respond(body, len(srv.requests))
        if content is None:
            time.sleep(HANG_S)
            return
        out = json.dumps({"id": "x", "object": "chat.completion", "model": body["model"],
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def responder(mode: str, good):
    """respond() for a mode: good, malformed-then-good, malformed (always), hang.
    good: the JSON object of a good reply, or a function of the request body giving it."""
    def respond(body: dict, n: int) -> str | None:
        if mode == "hang":
            return None
        if mode == "malformed" or (mode == "malformed-then-good" and n == 1):
            return MALFORMED
        return json.dumps(good(body) if callable(good) else good)
    return respond


def serve(respond) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeLLM)
    srv.respond, srv.requests, srv.daemon_threads = respond, [], True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def server_reaches(dsn: str, port: int) -> bool:
    """Whether the database server can open a connection to this machine's 127.0.0.1:port
    (not when it runs in a container on a bridge network, or on another host). A role
    that may not run PL/Python cannot tell: then it is assumed to."""
    probe = f"DO $$ import socket; socket.create_connection(('127.0.0.1', {int(port)}), 5).close() $$ LANGUAGE plpython3u"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(probe)
    except psycopg.errors.InsufficientPrivilege:
        return True
    except psycopg.Error:
        return False
    return True
