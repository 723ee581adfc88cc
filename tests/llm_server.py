"""A scripted OpenAI chat-completions server on 127.0.0.1, for tests that must not touch the
internet but should exercise the real HTTP path (litellm -> openai SDK -> httpx -> socket).

Each POST to /v1/chat/completions takes the next entry of the script (or asks `responder`):

- a string: a normal completion with that text as the assistant's content;
- a `Reply(...)`: full control: `status` (429, 500, ... answered with an OpenAI error body
  whose message is `text`),
  `delay_s` (sleep before answering, e.g. past the client's timeout), `text`, `finish_reason`,
  `usage` (token counts), `empty` (a choice with content ""), `raw` (bytes sent as the body).

Every request's JSON body is kept in `server.requests`, and its Authorization header (or None)
in `server.authorizations`, so a test can check what was sent.
When the script runs out, `default` is answered (a clean JSON reply unless told otherwise).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


@dataclass
class Reply:
    text: str | None = None
    status: int = 200
    delay_s: float = 0.0
    finish_reason: str = "stop"
    usage: dict | None = None
    empty: bool = False
    raw: bytes | None = None


CLEAN_DRIFT = json.dumps(
    {
        "thought": "A smooth quadratic penalty outside the trust region.",
        "name": "quadratic_trust",
        "code": (
            "def drift(ratio, advantage, epsilon):\n"
            "    excess = jax.nn.relu(jnp.abs(ratio - 1.0) - epsilon)\n"
            "    return excess ** 2 * jnp.abs(advantage)\n"
        ),
    }
)


class ScriptedLLMServer:
    def __init__(
        self,
        script: list[str | Reply] | None = None,
        responder: Callable[[dict], str | Reply] | None = None,
        default: str | Reply = CLEAN_DRIFT,
        port: int = 0,
    ):
        self._port = port
        self.script: list[str | Reply] = list(script or [])
        self.responder = responder
        self.default = default
        self.requests: list[dict] = []
        self.authorizations: list[str | None] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests answered at once
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "ScriptedLLMServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):  # /v1/models, for clients that probe it
                body = {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
                self._send(200, json.dumps(body).encode())

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    payload = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    payload = {}
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                server.authorizations.append(self.headers.get("Authorization"))
                reply = server._next(payload)
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                    self._answer(payload, reply)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, payload: dict, reply: Reply) -> None:
                if reply.raw is not None:
                    self._send(reply.status, reply.raw)
                elif reply.status != 200:
                    error = {
                        "error": {
                            "message": reply.text or f"scripted error {reply.status}",
                            "type": "rate_limit_error" if reply.status == 429 else "server_error",
                            "code": str(reply.status),
                        }
                    }
                    self._send(reply.status, json.dumps(error).encode())
                else:
                    self._send(200, json.dumps(_completion(payload, reply)).encode())

            def _send(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    if status == 429:
                        self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return self._httpd.server_address[1]

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script ----------------------------------------------------------------------------
    def push(self, *replies: str | Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def _next(self, payload: dict) -> Reply:
        with self._lock:
            self.requests.append(payload)
            if self.script:
                item = self.script.pop(0)
            elif self.responder is not None:
                item = self.responder(payload)
            else:
                item = self.default
        return item if isinstance(item, Reply) else Reply(text=item)


def _completion(payload: dict, reply: Reply) -> dict:
    text = "" if reply.empty else (reply.text or "")
    prompt_chars = sum(len(str(m.get("content") or "")) for m in payload.get("messages", []))
    usage = reply.usage or {
        "prompt_tokens": max(1, prompt_chars // 4),
        "completion_tokens": max(1, len(text) // 4),
    }
    usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
    return {
        "id": f"chatcmpl-scripted-{int(time.time() * 1e6)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": payload.get("model", "scripted"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": usage,
    }


def main() -> None:
    """`python tests/llm_server.py [--port P] [--script replies.json]`: serve until killed.
    The script file is a JSON list of strings or Reply field dicts; after it, CLEAN_DRIFT."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", default=None)
    args = parser.parse_args()
    script = []
    if args.script:
        with open(args.script) as handle:
            script = [
                item if isinstance(item, str) else Reply(**item) for item in json.load(handle)
            ]
    server = ScriptedLLMServer(script, port=args.port)
    server.start()
    print(f"serving on {server.api_base}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
