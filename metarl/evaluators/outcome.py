"""What an evaluation returns: the contract between the cascade and everything downstream
(the loop, the archive, the proposers' feedback, the CLI). Plain data, JSON round-trippable,
so it can cross the sandbox's result channel and be stored as-is."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

STAGES = ("static", "probes", "short", "full")


@dataclass
class EnvScore:
    env: str
    seeds: list[int]
    total_timesteps: int
    returns: list[float]  # final return per seed
    mean: float
    std: float
    normalised: float | None  # (mean - random) / (baseline - random); None when undefined
    baseline_mean: float | None
    random_mean: float | None
    curve_steps: list[int] = field(default_factory=list)
    curve: list[float | None] = field(default_factory=list)
    compile_s: float = 0.0
    run_s: float = 0.0
    steps_per_s: float = 0.0
    heldout: bool = False
    stage: str = "full"  # "short" or "full"


@dataclass
class Outcome:
    """Where a candidate's evaluation stopped, and why; its scores when it got that far."""

    passed: bool  # passed every stage
    stage: str  # the last stage attempted: one of STAGES
    reason: str | None = None  # one clear, specific reason when not passed (written for an LLM)
    warnings: list[str] = field(default_factory=list)
    env_scores: list[EnvScore] = field(default_factory=list)
    fitness: float | None = None  # aggregate normalised score over the training envs
    heldout: float | None = None  # aggregate over held-out envs; never used for selection
    fingerprint: str | None = None  # hash of outputs on the task's fixed probe batch
    duplicate_of: str | None = None  # id of an archived candidate with the same fingerprint
    timings: dict[str, float] = field(default_factory=dict)  # stage or phase -> seconds
    stdout: str = ""  # the candidate's captured (truncated) output, for debugging only
    # how the sandbox ran it: which network isolation held, limits, probe seed, worker exit
    sandbox: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        data = asdict(self)
        return _finite_or_none(data)

    @classmethod
    def from_dict(cls, data: dict) -> "Outcome":
        data = dict(data)
        data["env_scores"] = [EnvScore(**e) for e in data.get("env_scores", [])]
        return cls(**data)

    @classmethod
    def failure(cls, stage: str, reason: str, **extra) -> "Outcome":
        return cls(passed=False, stage=stage, reason=reason, **extra)


def _finite_or_none(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value
