"""A small deterministic OpenAI-compatible chat-completions server on loopback, for the tests.

The requested ``model`` picks the behaviour:
- ``memory``: a worker that adds every ``[chunk N`` it is shown to the memory's evidence; the
  manager answers ``ANSWER: `` + the conclusion.
- ``malformed``: replies text that is not JSON; ``malformed-once``: not JSON on every first try of a
  prompt, valid memory JSON when asked again.
- ``body-not-json``: HTTP 200 with a body that is not JSON.
- ``429-once``: 429 (Retry-After: 0) on the first request, then as ``memory``.
- ``500``: always HTTP 500. ``400``: always HTTP 400. ``slow``: answers after 2 s.
- ``first-read``: a reader whose memory can hold one chunk: a worker with an empty memory writes
  the first line of its text part as the conclusion and keeps it from then on; the manager answers
  the conclusion. Its answer is the first chunk it read, so the order decides it. Each reply takes
  20 ms, so concurrent requests overlap (``max_in_flight`` counts them).
- ``judge-new``, ``judge-0``: a topic judge answering ``{"topic": "new"}`` / ``{"topic": 0}``.
- ``summary``: answers "Summary of: " + the first 20 characters after "User: ".
- hostile ones: ``retry-after-3600`` (503 asking to wait an hour), ``drip`` (a 200 whose body comes
  a byte every 0.2 s), ``silent`` (reads the request, answers nothing for 30 s), ``huge`` (a reply
  of 64 MiB), ``nested`` (a reply nested 100,000 deep), ``content-list`` (content not a string),
  ``gzip-bomb`` (a gzip-encoded reply that decodes to 64 MiB), ``redirect`` (302 to itself),
  ``reset`` (the connection closed without an answer), ``content-null``, ``usage-odd`` (a usage
  that is not token counts).
"""

from __future__ import annotations

import gzip
import json
import re
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _first_read_reply(messages):
    user = messages[1]["content"]
    if messages[0]["content"].startswith("You are the manager"):
        return json.loads(user.split("Memory: ", 1)[1])["conclusion"]
    previous = json.loads(re.search(r"Memory so far: (\{.*?\})\n\nText part:", user, re.S).group(1))
    if not previous["conclusion"]:
        previous["conclusion"] = user.split("Text part:\n", 1)[1].split("\n")[1]  # below the [chunk N] label
    return json.dumps(previous)


def _memory_reply(messages):
    user = messages[1]["content"] if len(messages) > 1 else ""
    if messages[0]["content"].startswith("You are the manager"):
        memory = json.loads(user.split("Memory: ", 1)[1])
        return "ANSWER: " + memory["conclusion"]
    previous = json.loads(re.search(r"Memory so far: (\{.*?\})\n\nText part:", user, re.S).group(1))
    seen = [int(n) for n in re.findall(r"\[chunk (\d+)", user)]
    evidence = previous["evidence"] + [{"chunk": n, "quote": f"quote {n}"} for n in seen]
    done = [e["chunk"] for e in evidence]
    return json.dumps({"conclusion": "seen " + ",".join(map(str, done)), "open_questions": [], "evidence": evidence})


class LLMServer:
    def __init__(self):
        self.requests = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status, body, headers=()):
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append({"path": self.path, "body": body,
                                            "auth": self.headers.get("Authorization")})
                    count = len(server.requests)
                model, messages = body["model"], body["messages"]
                if self.path != "/v1/chat/completions":
                    return self._send(404, json.dumps({"error": "not found"}))
                if model == "500":
                    return self._send(500, json.dumps({"error": "boom"}))
                if model == "400":
                    return self._send(400, json.dumps({"error": {"message": "bad request"}}))
                if model == "429-once" and count == 1:
                    return self._send(429, json.dumps({"error": "slow down"}), [("Retry-After", "0")])
                if model == "body-not-json":
                    return self._send(200, "this is not json")
                if model == "retry-after-3600":
                    return self._send(503, json.dumps({"error": "later"}), [("Retry-After", "3600")])
                if model == "drip":
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    for _ in range(200):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.2)
                    return None
                if model == "silent":
                    time.sleep(30)
                    return None
                if model == "huge":
                    self.send_response(200)
                    self.send_header("Content-Length", str(64 << 20))
                    self.end_headers()
                    for _ in range(64):
                        self.wfile.write(b"a" * (1 << 20))
                    return None
                if model == "nested":
                    return self._send(200, '{"choices": ' + "[" * 100_000 + "]" * 100_000 + "}")
                if model == "gzip-bomb":
                    packed = gzip.compress(b" " * (64 << 20))
                    self.send_response(200)
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(packed)))
                    self.end_headers()
                    self.wfile.write(packed)
                    return None
                if model == "redirect":
                    return self._send(302, "{}", [("Location", self.path)])
                if model == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return None
                if model == "content-null":
                    return self._send(200, json.dumps({"choices": [{"message": {"content": None}}]}))
                if model == "usage-odd":
                    return self._send(200, json.dumps({"choices": [{"message": {"content": "fine"}}],
                                                       "usage": {"prompt_tokens": "lots", "completion_tokens": [1]}}))
                if model == "content-list":
                    return self._send(200, json.dumps({"choices": [{"message": {"content": [1, 2]}}]}))
                if model == "slow":
                    time.sleep(2)
                if model == "first-read":
                    with server._lock:
                        server.in_flight += 1
                        server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    time.sleep(0.02)
                    with server._lock:
                        server.in_flight -= 1
                manager = messages[0]["content"].startswith("You are the manager")
                asked_again = messages[-1]["content"].startswith("Your previous reply")
                if model == "malformed" and not manager:
                    text = "Sure! Here is the memory you asked for."
                elif model == "malformed-once" and not manager and not asked_again:
                    text = "{not json"
                elif model == "first-read":
                    text = _first_read_reply(messages)
                elif model == "summary":
                    text = "Summary of: " + messages[-1]["content"].split("User: ", 1)[1][:20]
                elif model.startswith("judge-"):
                    topic = model.removeprefix("judge-")
                    text = json.dumps({"topic": topic if topic == "new" else int(topic)})
                else:
                    text = _memory_reply(messages[:2])
                reply = {"id": f"r{count}", "object": "chat.completion", "model": model,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
                return self._send(200, json.dumps(reply))

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client that timed out hung up: fine
                pass

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
