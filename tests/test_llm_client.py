"""The litellm client against a real local HTTP server: retries, timeouts, costs, ensembles,
JSON mode, concurrency, keys. No internet."""

from __future__ import annotations

import os
import threading
import time

import pytest
from llm_server import Reply, ScriptedLLMServer

from metarl.discovery.proposers.llm.client import (
    LLMClient,
    LLMConfigError,
    ModelSpec,
    parse_models,
    redact,
)

MESSAGES = [{"role": "user", "content": "hi"}]


def client(server, models="openai/scripted", **kw):
    kw.setdefault("backoff_base_s", 0.01)
    kw.setdefault("timeout_s", 10)
    return LLMClient(
        models if isinstance(models, list) else [models], api_base=server.api_base, **kw
    )


@pytest.fixture
def server():
    with ScriptedLLMServer() as s:
        yield s


def test_clean_call_records_tokens_latency_and_unknown_cost(server):
    server.push(Reply(text="hello", usage={"prompt_tokens": 11, "completion_tokens": 7}))
    call = client(server).chat(MESSAGES)
    assert call.reply == "hello" and call.error is None
    assert (call.prompt_tokens, call.completion_tokens) == (11, 7)
    assert call.cost_usd is None  # an unpriced model costs "unknown", not an error
    assert call.latency_s > 0 and call.model == "openai/scripted"
    assert call.prompt == MESSAGES
    assert server.requests[0]["model"] == "scripted"


def test_known_model_is_priced_offline(server):
    server.push(Reply(text="x", usage={"prompt_tokens": 1000, "completion_tokens": 1000}))
    call = client(server, "openai/gpt-4o-mini").chat(MESSAGES)
    assert call.cost_usd is not None and 0 < call.cost_usd < 0.01


def test_retries_429_and_500_then_succeeds(server):
    server.push(Reply(status=429), Reply(status=500), Reply(status=503), "ok")
    call = client(server, max_retries=4).chat(MESSAGES)
    assert call.reply == "ok" and call.error is None
    assert len(server.requests) == 4


def test_gives_up_after_retries_without_raising(server):
    server.push(*[Reply(status=500)] * 3)
    call = client(server, max_retries=2).chat(MESSAGES)
    assert call.reply is None
    assert "500" in call.error and "after 3 attempts" in call.error
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server):
    server.push(Reply(status=400, text="bad request: messages malformed"))
    call = client(server, max_retries=3).chat(MESSAGES)
    assert call.reply is None and "BadRequest" in call.error and len(server.requests) == 1


def test_slow_reply_past_the_timeout(server):
    server.push(Reply(text="late", delay_s=3), Reply(text="late", delay_s=3))
    start = time.monotonic()
    call = client(server, timeout_s=0.5, max_retries=1).chat(MESSAGES)
    assert call.reply is None and "Timeout" in call.error
    assert time.monotonic() - start < 2.9
    assert len(server.requests) == 2  # retried once


def test_empty_reply_is_flagged(server):
    server.push(Reply(empty=True))
    call = client(server).chat(MESSAGES)
    assert call.reply == "" and call.error == "empty reply"


def test_json_mode_requested_and_dropped_when_refused(server):
    server.push(Reply(status=400, text="response_format is not supported by this model"), "{}")
    c = client(server)
    call = c.chat(MESSAGES)
    assert call.reply == "{}"
    assert server.requests[0]["response_format"] == {"type": "json_object"}
    assert "response_format" not in server.requests[1]
    c.chat(MESSAGES)  # remembered: not asked again
    assert "response_format" not in server.requests[2]


def test_ensemble_choice_weighted_reproducible_and_recorded(server):
    c = client(server, ["openai/big:3", "openai/small:1"], rng_seed=7)
    picks = [c.choose_model(request_seed=r) for r in range(400)]
    assert picks == [c.choose_model(request_seed=r) for r in range(400)]
    assert 0.65 < picks.count("openai/big") / 400 < 0.85
    call = c.chat(MESSAGES, request_seed=3)
    assert call.model == c.choose_model(request_seed=3)
    assert server.requests[-1]["model"] == call.model.split("/", 1)[1]


def test_concurrency_is_bounded(server):
    server.push(*[Reply(text="x", delay_s=0.3)] * 3)
    c = client(server, max_concurrency=1)
    threads = [threading.Thread(target=c.chat, args=(MESSAGES,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert server.max_in_flight == 1 and len(server.requests) == 3


def test_keys_never_appear_in_errors(server, monkeypatch):
    secret = "sk-test-" + "s3cr3t" * 4
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    server.push(Reply(status=401, text=f"Incorrect API key provided: {secret}"))
    call = client(server).chat(MESSAGES)
    assert call.reply is None and secret not in call.error and "[redacted]" in call.error
    assert secret not in str(call.prompt)
    assert redact(f"Authorization: Bearer {secret}") == "Authorization: Bearer [redacted]"


def test_dotenv_loaded_without_overriding(tmp_path, monkeypatch, server):
    (tmp_path / ".env").write_text("METARL_TEST_FROM_DOTENV=yes\nMETARL_TEST_SET=file\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("METARL_TEST_SET", "env")
    monkeypatch.delenv("METARL_TEST_FROM_DOTENV", raising=False)
    client(server)
    assert os.environ["METARL_TEST_FROM_DOTENV"] == "yes"
    assert os.environ["METARL_TEST_SET"] == "env"
    monkeypatch.delenv("METARL_TEST_FROM_DOTENV")


def test_model_strings():
    assert parse_models(["ollama/llama3:8b", "openai/x:2.5", "anthropic/claude"]) == [
        ModelSpec("ollama/llama3:8b", 1.0),
        ModelSpec("openai/x", 2.5),
        ModelSpec("anthropic/claude", 1.0),
    ]
    with pytest.raises(LLMConfigError):
        parse_models(["openai/x:0"])
    with pytest.raises(LLMConfigError, match="provider"):
        LLMClient(["nosuchprovider/model"])
