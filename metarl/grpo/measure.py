"""Measuring a proposer: sample completions for prompts training never sees and score them with
the reward, as fractions passing each stage (Wilson 95% intervals), duplicates, mean reward and
fitness (bootstrap 95% intervals) and the best fitness. `train-proposer` measures the base model,
the warm-started one and the trained one on the same held-out prompts with the same sampling
seeds; `eval-proposer` repeats it for any checkpoint.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

from transformers import PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from metarl.grpo.model import sample_replies
from metarl.grpo.rewards import PASS_STAGES, CascadeReward
from metarl.rl.scoring import bootstrap_interval

Z95 = 1.959963984540054


def wilson(successes: int, trials: int) -> tuple[float, float] | None:
    """The Wilson score 95% interval of a proportion; None with no trials."""
    if trials <= 0:
        return None
    p = successes / trials
    centre = (p + Z95**2 / (2 * trials)) / (1 + Z95**2 / trials)
    half = Z95 * math.sqrt(p * (1 - p) / trials + Z95**2 / (4 * trials**2)) / (1 + Z95**2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Rate:
    """A proportion with its Wilson 95% interval."""

    count: int
    total: int
    low: float | None
    high: float | None

    @property
    def value(self) -> float | None:
        return self.count / self.total if self.total else None

    @classmethod
    def of(cls, count: int, total: int) -> "Rate":
        interval = wilson(count, total)
        return cls(count, total, *(interval or (None, None)))


@dataclass
class Mean:
    """A mean with its bootstrap 95% interval (None with fewer than two values)."""

    value: float | None
    low: float | None
    high: float | None
    count: int

    @classmethod
    def of(cls, values: list[float]) -> "Mean":
        if not values:
            return cls(None, None, None, 0)
        interval = bootstrap_interval([values])
        low, high = interval if interval else (None, None)
        return cls(sum(values) / len(values), low, high, len(values))


@dataclass
class ProposerScore:
    """How a proposer did on a set of prompts."""

    label: str  # what was measured: base, sft, trained, or a checkpoint's name
    completions: int
    excluded: int  # could not be evaluated (evaluator faults)
    passed: dict[str, Rate]  # PASS_STAGES -> fraction of scorable completions
    duplicates: Rate
    reward: Mean
    fitness: Mean  # over completions that were scored (passed every stage)
    best_fitness: float | None
    best_id: str | None
    tokens_per_s: float
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ProposerScore":
        data = dict(data)
        data["passed"] = {k: Rate(**v) for k, v in data["passed"].items()}
        data["duplicates"] = Rate(**data["duplicates"])
        data["reward"] = Mean(**data["reward"])
        data["fitness"] = Mean(**data["fitness"])
        return cls(**data)


def measure_proposer(
    network: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[dict],
    reward: CascadeReward,
    *,
    label: str,
    completions: int,
    max_tokens: int,
    temperature: float,
    rng_seed: int,
    step: int = 0,
) -> ProposerScore:
    """Sample `completions` replies to each prompt row and score them all in one batch.

    Args:
        network, tokenizer: the proposer to measure.
        rows: prompt rows (grpo.prompts.prompt_rows): `prompt` plus archive columns.
        reward: the reward (its archive recorder labels the completions `label`).
        label: the measurement's name (the archive's phase).
        completions: replies per prompt.
        max_tokens, temperature: sampling, as in training.
        rng_seed: prompt i is sampled with torch seed `rng_seed + i` (the same draws for every
            model).
        step: the optimiser steps behind `network`.

    Returns:
        The ProposerScore.
    """
    start = time.perf_counter()
    replies: list[str] = []
    columns: dict[str, list] = {}
    tokens = 0
    generate_s = 0.0
    for index, row in enumerate(rows):
        begun = time.perf_counter()
        texts, lengths = sample_replies(
            network,
            tokenizer,
            row["prompt"],
            completions,
            max_tokens,
            temperature,
            rng_seed + index,
        )
        generate_s += time.perf_counter() - begun
        replies += texts
        tokens += sum(lengths)
        for key, value in row.items():
            columns.setdefault(key, []).extend([value] * completions)
        columns.setdefault("completion_tokens", []).extend(lengths)
    previous, reward.phase = reward.phase, label
    try:
        stats = reward.score(replies, columns, step, tokens)
    finally:
        reward.phase = previous
    verdicts = reward.last_verdicts
    scorable = stats.scorable
    scored = [(v.outcome.fitness, v.candidate_id) for v in verdicts if v.label == "scored"]
    scored = [(f, cid) for f, cid in scored if f is not None and math.isfinite(f)]
    best = max(scored, key=lambda pair: pair[0], default=(None, None))
    return ProposerScore(
        label=label,
        completions=stats.completions,
        excluded=stats.excluded,
        passed={stage: Rate.of(stats.passed[stage], scorable) for stage in PASS_STAGES},
        duplicates=Rate.of(stats.duplicates, stats.completions),
        reward=Mean.of([r for r in stats.rewards if r is not None]),
        fitness=Mean.of([f for f, _ in scored]),
        best_fitness=best[0],
        best_id=best[1],
        tokens_per_s=tokens / generate_s if generate_s > 0 else 0.0,
        seconds=time.perf_counter() - start,
    )
