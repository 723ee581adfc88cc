"""A candidate's learning curves and returns per environment, as plain data for the curve plots.
Kept out of story.py because they are read per candidate (the top ones, an LPG run's best on its
held-out levels), not per run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class EnvCurve:
    """A candidate's learning curve and score on one environment."""

    env: str
    heldout: bool
    steps: list[int]
    mean: list[float | None]
    std: list[float | None]  # empty when the archive did not record the seed spread
    normalised: float | None
    normalised_ci: list[float] | None
    seeds: int
    role: str = ""  # train | validation | test ("" in rows from before roles)
    final_return: float | None = None  # the mean over seeds of the agents' final return
    reference_return: float | None = None  # the reference's (the baseline PPO; an LPG's: A2C)
    random_return: float | None = None  # a uniformly random policy's

    @property
    def beats_reference(self) -> bool | None:
        """Whether its final return is above the reference's; None when either is unknown."""
        if self.final_return is None or self.reference_return is None:
            return None
        return self.final_return > self.reference_return


@dataclass
class Curves:
    id: str
    name: str
    is_baseline: bool
    envs: list[EnvCurve]


def quantile(values: list[float], q: float) -> float | None:
    """The `q` quantile of `values` by the nearest-rank rule (a value that occurred); None when
    there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def curves_of(candidate_id: str, name: str, evaluations: list[dict], baseline: bool) -> Curves:
    """A candidate's full-budget selection curves and returns, training envs first."""
    envs = [
        EnvCurve(
            env=ev["env"],
            heldout=bool(ev["heldout"]),
            steps=list(ev["curve_steps"] or []),
            mean=list(ev["curve"] or []),
            std=list(ev.get("curve_std") or []),
            normalised=ev["normalised"],
            normalised_ci=(
                [ev["normalised_low"], ev["normalised_high"]]
                if ev.get("normalised_low") is not None and ev.get("normalised_high") is not None
                else None
            ),
            seeds=len(ev["seeds"] or []),
            role=ev.get("role") or "",
            final_return=ev.get("mean"),
            reference_return=ev.get("baseline_mean"),
            random_return=ev.get("random_mean"),
        )
        for ev in evaluations
    ]
    envs.sort(key=lambda e: e.heldout)
    return Curves(id=candidate_id, name=name, is_baseline=baseline, envs=envs)
