"""Scores: returns normalised between a random policy (0) and the task's baseline seed (1)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def normalised_score(mean_return: float, random_return: float, baseline_return: float) -> float:
    """(R - R_random) / (R_baseline - R_random): 0 is random, 1 is as good as the baseline.

    When the baseline is no better than random the environment cannot discriminate, and the
    score is NaN rather than a huge or sign-flipped number.
    """
    gap = baseline_return - random_return
    if not math.isfinite(mean_return) or not math.isfinite(gap) or abs(gap) < 1e-8:
        return math.nan
    return (mean_return - random_return) / gap


def interquartile_mean(values: Sequence[float]) -> float:
    """Mean of the middle 50% (rliable's IQM); the plain mean below four values."""
    x = np.sort(np.asarray([v for v in values if math.isfinite(v)], dtype=float))
    if x.size == 0:
        return math.nan
    if x.size < 4:
        return float(x.mean())
    cut = x.size // 4
    return float(x[cut : x.size - cut].mean())


def aggregate(scores: Sequence[float], method: str = "mean") -> float:
    """A suite's fitness from its per-environment normalised scores."""
    finite = [s for s in scores if math.isfinite(s)]
    if not finite:
        return math.nan
    if method == "mean":
        return float(np.mean(finite))
    if method == "iqm":
        return interquartile_mean(finite)
    raise ValueError(f"unknown aggregate {method!r}; choose mean or iqm")
