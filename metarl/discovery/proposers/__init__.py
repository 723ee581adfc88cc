"""Proposers turn the loop's request into candidate source (base.py holds the contract).

The kinds a run may name (`--proposer`) are registered in `PROPOSERS`; the config validates a
kind against it, the CLI builds one with `make_proposer(kind, config)`, and the loop reads what
it needs to know about a kind (whether one generation's requests may be sent concurrently) from
its `ProposerKind`, so neither names a kind. Adding a proposer is one module and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from metarl.errors import MetarlError

# This package's __init__ runs before any proposer module (base.py, the LLM client, the local
# LLM server), so it imports none of them at its top: base.py and the mutation proposer load
# jax, the LLM proposer litellm. A kind's module loads when that kind is built.


class ProposerUnavailable(MetarlError):
    """A proposer kind that cannot be built here (a missing optional dependency); one line."""


@dataclass(frozen=True)
class ProposerKind:
    name: str
    build: Callable[[Any], Any]  # a resolved DiscoverConfig -> a base.Proposer
    needs_models: bool = False  # the config must name at least one model
    # a generation's requests may be proposed concurrently, up to the config's max_concurrency
    concurrent: bool = False


def _mutation(config) -> Any:
    # lazy: a kind's module loads only when that kind is built (see the note at the top)
    from metarl.discovery.proposers.mutation import MutationProposer

    return MutationProposer()


def _llm(config) -> Any:
    try:
        # lazy: litellm is loaded only when an LLM proposer is built
        from metarl.discovery.proposers.llm import build_llm_proposer
    except ImportError as error:
        raise ProposerUnavailable(f"the LLM proposer is unavailable: {error}") from None
    options = {
        "models": list(config.models),
        "api_base": config.api_base,
        "mode": config.mode,
        "model_choice": config.model_choice,
        "timeout_s": config.llm_timeout,
        "max_concurrency": config.max_concurrency,
        "temperature": config.temperature,
        "rng_seed": config.rng_seed,
    }
    return build_llm_proposer({k: v for k, v in options.items() if v is not None})


PROPOSERS: dict[str, ProposerKind] = {
    "mutation": ProposerKind("mutation", _mutation),
    "llm": ProposerKind("llm", _llm, needs_models=True, concurrent=True),
}


def make_proposer(kind: str, config) -> Any:
    """A new proposer (a base.Proposer) of registered `kind` for the resolved DiscoverConfig
    `config`.

    Raises:
        KeyError: `kind` is not registered (DiscoverConfig.resolved() rejects it first).
        ProposerUnavailable: the kind's optional dependency is missing.
        ValueError: an option the kind rejects (a bad model string, mode...), one line.
    """
    return PROPOSERS[kind].build(config)


__all__ = ["PROPOSERS", "ProposerKind", "ProposerUnavailable", "make_proposer"]
