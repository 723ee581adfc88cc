"""One chat call to a language model through litellm, made robust.

- Any litellm provider string works (`openai/...`, `anthropic/...`, `ollama/...`,
  `hosted_vllm/...`), plus any OpenAI-compatible server through `api_base`.
- Keys come from the environment or a `.env` file (python-dotenv, never overriding what is set);
  they are never logged, archived or put in an error message (`redact`). Neither are the
  credentials of `api_base` (`http://user:pass@host/v1?api_key=...`): the URL goes to litellm
  as given, and every error text is stripped of it and of the request's api_key.
- Transient faults (timeouts, connection errors, 429, 5xx) are retried with exponential backoff
  and jitter; a per-call timeout; a semaphore bounds concurrent calls. `chat` never raises for a
  model fault: it returns an `LLMCall` whose `error` says what happened.
- Tokens and cost per call; cost uses litellm's bundled price map offline
  (`LITELLM_LOCAL_MODEL_COST_MAP=True`) and is `None` ("unknown") for unpriced models.
- Several models (an ensemble): the model of each call is drawn reproducibly from
  (rng_seed, request seed, attempt), by fixed weights or, when a `ModelBandit` is set
  (bandit.py, `--model-choice bandit`), by the bandit's state too; it is recorded in the call.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from dataclasses import dataclass

from metarl.discovery.proposers.base import LLMCall
from metarl.discovery.proposers.llm.bandit import ModelBandit
from metarl.errors import USAGE, MetarlError
from metarl.evaluation.text import redact_secrets, url_secrets

logger = logging.getLogger(__name__)

# Must be set before litellm is imported anywhere: use the bundled price map, never fetch one.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}
# Providers that accept an OpenAI-style key but whose local servers do not need one.
_KEYLESS_OK = {"openai", "hosted_vllm", "openai_like", "lm_studio", "llamafile"}


class LLMConfigError(MetarlError, ValueError):
    """A bad model string or option: a user error, reported in one line."""

    exit_code = USAGE


@dataclass(frozen=True)
class ModelSpec:
    model: str
    weight: float = 1.0


def parse_models(models: list[str] | str) -> list[ModelSpec]:
    """`provider/model` or `provider/model:weight`. A suffix after the last ':' is a weight only
    when it is a number, so Ollama tags such as `ollama/llama3:8b` stay part of the name."""
    if isinstance(models, str):
        models = [models]
    specs = []
    for text in models:
        text = text.strip()
        name, weight = text, 1.0
        head, sep, tail = text.rpartition(":")
        if sep and head:
            try:
                weight = float(tail)
                name = head
            except ValueError:
                pass
        if not name:
            raise LLMConfigError(f"empty model name in {text!r}")
        if not weight > 0:
            raise LLMConfigError(f"model weight must be positive in {text!r}")
        specs.append(ModelSpec(name, weight))
    if not specs:
        raise LLMConfigError("no model given: pass --model PROVIDER/MODEL")
    return specs


# Key-shaped strings; a pattern's group 1, when present, is kept (e.g. "Bearer ").
_SECRET_PATTERNS = [
    re.compile(r"()\b(?:sk|pk|rk|gsk|xai|hf)[-_][A-Za-z0-9_\-]{8,}"),
    re.compile(r"()\bAIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}"),
    re.compile(r"(?i)(api[_-]?key['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]{6,}"),
]


def redact(text: str, secrets: list[str] | None = None) -> str:
    """Remove anything that looks like a key, the values of *_KEY/*_TOKEN variables, URL
    credentials (`http://***@host`, `?api_key=***`) and the literal `secrets`.

    Args:
        text: an error text (litellm's exception message, say).
        secrets: values to remove as well: the request's api_key, its URL's credentials.

    Returns:
        The text, safe to archive, log and show.
    """
    text = redact_secrets(text, secrets or ())
    for name, value in os.environ.items():
        if value and len(value) >= 8 and re.search(r"KEY|TOKEN|SECRET", name.upper()):
            text = text.replace(value, "[redacted]")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + "[redacted]", text)
    return text


def load_env_file(path: str | None = None) -> None:
    """Load `.env` (from `path`, or searched upward from the working directory) into the
    environment without overriding variables already set."""
    try:
        from dotenv import find_dotenv, load_dotenv
    except ImportError:  # python-dotenv is a dependency; tolerate its absence anyway
        return
    target = path or find_dotenv(usecwd=True)
    if target:
        load_dotenv(target, override=False)


def import_litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    litellm.drop_params = True  # a provider that lacks a parameter (e.g. seed) ignores it
    return litellm


class LLMClient:
    def __init__(
        self,
        models: list[str] | list[ModelSpec],
        api_base: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        max_concurrency: int = 4,
        temperature: float = 0.8,
        max_tokens: int | None = 4096,
        rng_seed: int = 0,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        json_mode: bool = True,
        bandit: ModelBandit | None = None,
    ):
        if isinstance(models, str) or not all(isinstance(m, ModelSpec) for m in models):
            models = parse_models(models)
        self.models: list[ModelSpec] = list(models)
        self.api_base = api_base or None
        # what an error text must never quote: the URL's credentials, the api_key sent
        self._secrets: list[str] = url_secrets(self.api_base)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.rng_seed = int(rng_seed)
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.json_mode = json_mode
        # picks each call's model among several when set; None: the fixed weights
        self.bandit = bandit if len(self.models) > 1 else None
        self._semaphore = threading.BoundedSemaphore(max(1, int(max_concurrency)))
        self._no_json_mode: set[str] = set()  # models that rejected response_format
        self._unpriced: set[str] = set()  # models whose unknown price was logged
        self._litellm = None
        load_env_file()
        self._check_models()

    # -- model choice ----------------------------------------------------------------------
    def choose_model(self, request_seed: int = 0, attempt: int = 0) -> str:
        """The model of a call: the only one, the bandit's choice when one is set, else a draw
        by the models' weights; reproducible from (rng_seed, request_seed, attempt) and, with a
        bandit, its state."""
        if len(self.models) == 1:
            return self.models[0].model
        if self.bandit is not None:
            return self.bandit.choose(self.rng_seed, request_seed, attempt)
        rng = random.Random(f"{self.rng_seed}:{request_seed}:{attempt}")
        weights = [m.weight for m in self.models]
        return rng.choices([m.model for m in self.models], weights=weights, k=1)[0]

    def _check_models(self) -> None:
        litellm = self._lazy_litellm()
        for spec in self.models:
            try:
                litellm.get_llm_provider(spec.model, api_base=self.api_base)
            except Exception:
                raise LLMConfigError(
                    f"litellm does not know the provider of {spec.model!r}; write it as "
                    "PROVIDER/MODEL, e.g. openai/gpt-4o-mini, anthropic/claude-3-5-haiku-latest, "
                    "ollama/llama3, or openai/NAME with --api-base for an OpenAI-compatible server"
                ) from None

    def _lazy_litellm(self):
        if self._litellm is None:
            self._litellm = import_litellm()
        return self._litellm

    # -- the call --------------------------------------------------------------------------
    def chat(
        self,
        messages: list[dict[str, str]],
        model: str | None = None,
        request_seed: int = 0,
        attempt: int = 0,
    ) -> LLMCall:
        """One completion, retried on transient faults. Never raises for a model fault."""
        model = model or self.choose_model(request_seed, attempt)
        sent = [dict(m) for m in messages]
        start = time.monotonic()
        error: str | None = None
        for retry in range(self.max_retries + 1):
            try:
                with self._semaphore:
                    response = self._complete(model, sent)
                return self._record(model, sent, response, time.monotonic() - start)
            except Exception as exc:  # noqa: BLE001 - every fault becomes a recorded error
                error = _describe(exc, self._secrets)
                if not _retryable(exc) or retry == self.max_retries:
                    break
                time.sleep(self._backoff(retry, exc))
        attempts = retry + 1
        return LLMCall(
            model=model,
            prompt=sent,
            reply=None,
            latency_s=time.monotonic() - start,
            error=redact(
                f"{error} (after {attempts} attempt{'s' if attempts > 1 else ''})", self._secrets
            ),
        )

    def _complete(self, model: str, messages: list[dict[str, str]]):
        litellm = self._lazy_litellm()
        kwargs: dict = {
            "model": model,
            "messages": messages,
            "timeout": self.timeout_s,
            "max_retries": 0,  # retries are ours, with backoff and a record
            "temperature": self.temperature,
        }
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        if self.api_base:
            kwargs["api_base"] = self.api_base
            provider = _provider(litellm, model, self.api_base)
            if provider in _KEYLESS_OK and not _has_key_for(provider):
                kwargs["api_key"] = "sk-no-key-needed"  # local servers ignore it
        if kwargs.get("api_key") and kwargs["api_key"] not in self._secrets:
            self._secrets.append(kwargs["api_key"])
        use_json = (
            self.json_mode
            and model not in self._no_json_mode
            and _supports_json(litellm, model, self.api_base)
        )
        if use_json:
            kwargs["response_format"] = {"type": "json_object"}
        try:
            return litellm.completion(**kwargs)
        except Exception as exc:
            if use_json and _status(exc) in (400, 422) and "response_format" in str(exc):
                self._no_json_mode.add(model)
                kwargs.pop("response_format")
                return litellm.completion(**kwargs)
            raise

    def _record(self, model, messages, response, latency_s: float) -> LLMCall:
        choice = response.choices[0] if getattr(response, "choices", None) else None
        reply = (getattr(getattr(choice, "message", None), "content", None) or "") if choice else ""
        usage = getattr(response, "usage", None)
        # a reply cut off at the token limit is still a reply: extraction says what is missing
        error = None if reply.strip() else "empty reply"
        return LLMCall(
            model=model,
            prompt=messages,
            reply=reply,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            cost_usd=self._cost(model, response),
            latency_s=latency_s,
            error=error,
        )

    def _cost(self, model: str, response) -> float | None:
        """The call's price in USD, or None when the model has no known price (logged once per
        model: a cost budget cannot count its calls)."""
        litellm = self._lazy_litellm()
        hidden = getattr(response, "_hidden_params", None) or {}
        cost = hidden.get("response_cost")
        if cost is None:
            try:
                cost = litellm.completion_cost(completion_response=response)
            except Exception as error:  # noqa: BLE001 - unmapped model: unknown cost, not an error
                if model not in self._unpriced:
                    self._unpriced.add(model)
                    logger.warning(
                        "no known price for %s (%s: %s): its calls' cost is unknown and not "
                        "counted against --max-cost",
                        model,
                        type(error).__name__,
                        redact_secrets(str(error), self._secrets),
                    )
                return None
        try:
            return float(cost)
        except (TypeError, ValueError):
            return None

    def _backoff(self, retry: int, exc: Exception) -> float:
        after = _retry_after(exc)
        if after is not None:
            return min(after, self.backoff_max_s)
        delay = min(self.backoff_max_s, self.backoff_base_s * (2**retry))
        return delay * (0.5 + random.random() / 2)  # jitter; not part of reproducible state


def _provider(litellm, model: str, api_base: str | None) -> str | None:
    try:
        return litellm.get_llm_provider(model, api_base=api_base)[1]
    except Exception as error:  # noqa: BLE001 - an unknown provider: no keyless default
        logger.debug("litellm knows no provider for %s: %s", model, error)
        return None


def _has_key_for(provider: str) -> bool:
    names = {"openai": "OPENAI_API_KEY", "hosted_vllm": "HOSTED_VLLM_API_KEY"}
    return bool(os.environ.get(names.get(provider, "OPENAI_API_KEY")))


def _supports_json(litellm, model: str, api_base: str | None) -> bool:
    try:
        provider = _provider(litellm, model, api_base)
        params = litellm.get_supported_openai_params(
            model=model.split("/", 1)[-1]
            if provider and model.startswith(provider + "/")
            else model,
            custom_llm_provider=provider,
        )
        return bool(params) and "response_format" in params
    except Exception as error:  # noqa: BLE001 - unknown support: ask without JSON mode
        logger.debug("litellm cannot say whether %s takes response_format: %s", model, error)
        return False


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    try:
        return int(status) if status is not None else None
    except (TypeError, ValueError):
        return None


def _retryable(exc: Exception) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {
        "AuthenticationError",
        "PermissionDeniedError",
        "NotFoundError",
        "BadRequestError",
        "ContextWindowExceededError",
        "ContentPolicyViolationError",
        "UnsupportedParamsError",
        "BudgetExceededError",
    }:
        return False
    if names & {
        "Timeout",
        "APITimeoutError",
        "TimeoutError",
        "RateLimitError",
        "APIConnectionError",
        "InternalServerError",
        "ServiceUnavailableError",
        "BadGatewayError",
        "ConnectionError",
    }:
        return True
    status = _status(exc)
    return status is not None and (status in RETRYABLE_STATUS or status >= 500)


def _retry_after(exc: Exception) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _describe(exc: Exception, secrets: list[str] | None = None) -> str:
    """One redacted line: the exception's type, HTTP status and first message line."""
    status = _status(exc)
    text = redact(str(exc), secrets).strip()  # before the cut, which could split a secret
    message = text.splitlines()[0] if text else ""
    if len(message) > 300:
        message = message[:300] + "..."
    prefix = type(exc).__name__ + (f" ({status})" if status else "")
    return f"{prefix}: {message}" if message else prefix
