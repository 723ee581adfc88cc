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


# Bootstrap settings: fixed, so that an interval is reproducible from the archived returns.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
BOOTSTRAP_CONFIDENCE = 0.95


def per_seed_normalised(
    returns: Sequence[float], random_return: float, baseline_return: float
) -> np.ndarray | None:
    """Each seed's final return normalised like `normalised_score`; their mean is the env's
    normalised score. None when the score is undefined (a non-finite return, or a baseline no
    better than random)."""
    x = np.asarray(returns, dtype=float)
    gap = baseline_return - random_return
    if x.size == 0 or not np.all(np.isfinite(x)) or not math.isfinite(gap) or abs(gap) < 1e-8:
        return None
    return (x - random_return) / gap


def bootstrap_interval(
    per_seed: Sequence[Sequence[float]],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = BOOTSTRAP_CONFIDENCE,
    rng_seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the mean over environments of the mean over seeds.

    `per_seed[e][i]` is environment e's (normalised) score with training seed i. Each resample
    draws seeds with replacement, jointly across environments (seed i of every env goes
    together, since all envs are trained on the same seeds), averages each env over the drawn
    seeds and then averages over envs; the interval is the (1 - confidence)/2 and
    (1 + confidence)/2 percentiles of those resampled means. With one env it is that env's
    interval. Envs with different seed counts (never the case in a planned evaluation) are
    resampled independently. The RNG seed is fixed: the same numbers give the same interval.

    Returns:
        (low, high); None when there is nothing to resample: no envs, an env with a single
        seed (one seed says nothing about the spread over seeds, and a zero-width interval
        would claim certainty), or a non-finite value.
    """
    arrays = [np.asarray(values, dtype=float) for values in per_seed]
    if not arrays or any(a.ndim != 1 or a.size < 2 or not np.all(np.isfinite(a)) for a in arrays):
        return None
    rng = np.random.default_rng(rng_seed)
    sizes = {a.size for a in arrays}
    if len(sizes) == 1:
        n = sizes.pop()
        index = rng.integers(0, n, size=(resamples, n))
        means = np.mean([a[index].mean(axis=1) for a in arrays], axis=0)
    else:
        means = np.mean(
            [a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1) for a in arrays],
            axis=0,
        )
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)
