"""The LLM proposer: candidate programs written by a language model through litellm.

`build_llm_proposer(options)` is what the discover CLI calls (imported lazily, so that litellm
is only loaded when an LLM is asked for). Options, all optional but `models`:

- models: ["provider/model" or "provider/model:weight", ...] (an ensemble when several)
- model_choice: how each call's model is picked among several: "bandit" (bandit.py: Thompson
  sampling on improvement per dollar, per second for unpriced models) or "weights" (the fixed
  `:weight` shares)
- api_base: an OpenAI-compatible server's URL (a local vLLM, llama.cpp, Ollama, the bundled
  `python -m metarl.discovery.proposers.llm.local_server`), or None
- mode: "population" (one prompt per child) or "conversation" (one growing dialogue)
- timeout_s, max_retries, max_concurrency, temperature, max_tokens
- rng_seed: the ensemble's and edit forms' randomness (resumable through get_state/set_state)
- history_token_budget: conversation mode's budget before the history is summarised
- edit_forms: {"rewrite": w, "diff": w} for one-parent requests
- repair_rounds: round-trips that send a parse problem back to the model (1)

See docs/llm.md.
"""

from __future__ import annotations

from metarl.discovery.proposers.llm.bandit import MODEL_CHOICES, ModelBandit
from metarl.discovery.proposers.llm.client import LLMClient, LLMConfigError, parse_models
from metarl.discovery.proposers.llm.proposer import MODES, LLMProposer

DEFAULTS = {
    "api_base": None,
    "mode": "population",
    "model_choice": "bandit",
    "timeout_s": 120.0,
    "max_retries": 4,
    "max_concurrency": 4,
    "temperature": 0.8,
    "max_tokens": 4096,
    "rng_seed": 0,
    "history_token_budget": 16000,
    "edit_forms": None,
    "repair_rounds": 1,
}


def build_llm_proposer(options: dict) -> LLMProposer:
    """Raises LLMConfigError (a ValueError) with one clear line on bad options."""
    unknown = set(options) - set(DEFAULTS) - {"models", "model"}
    if unknown:
        raise LLMConfigError(f"unknown LLM proposer option(s): {', '.join(sorted(unknown))}")
    opts = {**DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
    models = opts.get("models") or opts.get("model")
    if not models:
        raise LLMConfigError("the LLM proposer needs a model: --model PROVIDER/MODEL")
    if opts["mode"] not in MODES:
        raise LLMConfigError(f"unknown mode {opts['mode']!r}; choose one of: {', '.join(MODES)}")
    if opts["model_choice"] not in MODEL_CHOICES:
        raise LLMConfigError(
            f"unknown model choice {opts['model_choice']!r}; choose one of: "
            f"{', '.join(MODEL_CHOICES)}"
        )
    for key in ("timeout_s", "max_concurrency", "history_token_budget"):
        if not float(opts[key]) > 0:
            raise LLMConfigError(f"{key} must be positive, got {opts[key]!r}")
    if int(opts["max_retries"]) < 0:
        raise LLMConfigError("max_retries must be >= 0")
    specs = parse_models(models)
    bandit = None
    if opts["model_choice"] == "bandit" and len(specs) > 1:
        bandit = ModelBandit.for_models([spec.model for spec in specs])
    client = LLMClient(
        specs,
        api_base=opts["api_base"],
        timeout_s=float(opts["timeout_s"]),
        max_retries=int(opts["max_retries"]),
        max_concurrency=int(opts["max_concurrency"]),
        temperature=float(opts["temperature"]),
        max_tokens=int(opts["max_tokens"]) if opts["max_tokens"] else None,
        rng_seed=int(opts["rng_seed"]),
        bandit=bandit,
    )
    return LLMProposer(
        client,
        mode=opts["mode"],
        edit_forms=opts["edit_forms"],
        history_token_budget=int(opts["history_token_budget"]),
        repair_rounds=int(opts["repair_rounds"]),
        rng_seed=int(opts["rng_seed"]),
    )


__all__ = [
    "MODEL_CHOICES",
    "LLMClient",
    "LLMConfigError",
    "LLMProposer",
    "ModelBandit",
    "build_llm_proposer",
    "parse_models",
]
