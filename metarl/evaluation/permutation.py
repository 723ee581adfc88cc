"""The exact permutation test of P(X > Y): how a race's look decides without trusting a bootstrap
at 4-12 runs.

Why not the bootstrap interval. A percentile interval of P(X > Y) from 4-8 runs a side is too
narrow: when every run of one side beats every run of the other, every resample gives P = 1 and
the interval [1, 1] clears any confidence. Simulated at minatar-cpu's race design (1 validation
env, rounds of 4 seeds, a cap of 8; `benchmarks/race_error.py --envs 1 --cap 8`, 500 runs of
10 races), races decided by the bootstrap at the run's spent error of 0.05 crowned a challenger
that was no better in 0.194 of the runs; decided by this test (at `statistics.race_plan`'s
levels), in 0.034.

The test. Under "the challenger is no better" the two sides' runs are exchangeable: any split
of the pooled runs into n and m is as likely as the one observed. The p-value is the share of
the C(n + m, n) splits whose statistic is at least the observed one, so P(p <= alpha) <= alpha
for every alpha whatever the scores' distribution (ties included): the level is exact, not
asymptotic. The statistic is `statistics.probability_of_improvement`'s point estimate, the mean
over tasks of the Mann-Whitney U over its pairs, ties counted 1/2, divided by n m. A run (one
training seed) keeps its scores on every task together in every split.

How it is counted. With midranks r_t(i) of the pooled runs within task t, U_t is the
challenger's rank sum minus n (n + 1) / 2, so the statistic is an increasing function of
sum over the challenger's runs of w_i = 2 * sum_t r_t(i), an integer (midranks are halves). The
number of n-run subsets with each weight sum is counted by dynamic programming (as for the
Mann-Whitney exact distribution), exact for any sizes, ties and tasks in
O(pooled x n x max sum) rather than by listing the splits (12,870 at 8 a side, 1.2e8 at 16).
Counts are float64: exact below 2^53 splits (up to 28 runs a side), to 1e-15 relative beyond.

What it can resolve. The smallest p-value is 1 / C(n + m, n), at a complete separation of the
two sides (`smallest_p`): 1/70 at 4 runs a side, 1/12,870 at 8. A look tested at a level below
that can never call BETTER, whatever the scores; `statistics.race_plan` spends no error there.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import scipy.stats


class PValues(NamedTuple):
    """One-sided exact p-values of P(X > Y) against exchangeable sides."""

    better: float  # share of splits with a statistic >= the observed: small when x is better
    worse: float  # share of splits with a statistic <= the observed: small when x is worse


def permutation_p_values(x: np.ndarray, y: np.ndarray) -> PValues:
    """Exact one-sided p-values of P(x > y) over every split of the pooled runs.

    Args:
        x: (runs_x x tasks) finite scores of the challenger.
        y: (runs_y x tasks) finite scores of the other side, on the same tasks.

    Returns:
        PValues(better, worse), each in (0, 1].

    Raises:
        ValueError: not two matrices of finite scores on the same number of tasks.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or 0 in x.shape + y.shape:
        raise ValueError(f"x {x.shape} and y {y.shape}: runs x tasks, on the same tasks")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("the permutation test needs finite scores")
    pooled = np.vstack([x, y])
    ranks = scipy.stats.rankdata(pooled, axis=0)  # midranks within each task
    weights = np.rint(2.0 * ranks.sum(axis=1)).astype(np.int64)
    n = x.shape[0]
    counts = subset_sum_counts(weights, n)
    observed = int(weights[:n].sum())
    total = counts.sum()
    return PValues(
        better=float(counts[observed:].sum() / total),
        worse=float(counts[: observed + 1].sum() / total),
    )


def subset_sum_counts(weights: np.ndarray, size: int) -> np.ndarray:
    """How many `size`-element subsets of `weights` have each sum.

    Args:
        weights: non-negative integers.
        size: the subsets' size, 1 <= size <= len(weights).

    Returns:
        counts (float64), counts[s] = the number of subsets with sum s, s = 0 .. the largest sum.
    """
    weights = np.asarray(weights, dtype=np.int64)
    top = int(np.sort(weights)[::-1][:size].sum())
    counts = np.zeros((size + 1, top + 1))
    counts[0, 0] = 1.0
    for w in weights:
        w = int(w)
        # add w to every (k - 1)-subset: read the old row before it is written (descending k)
        counts[1:, w:] += counts[:-1, : top + 1 - w].copy()
    return counts[size]


def smallest_p(runs_x: int, runs_y: int) -> float:
    """The smallest p-value `permutation_p_values` can return with these sizes: one split of
    all C(runs_x + runs_y, runs_x), at a complete separation without ties."""
    return 1.0 / math.comb(runs_x + runs_y, runs_x)


def best_finish_p(
    x: np.ndarray, y: np.ndarray, runs_x: int, runs_y: int, enough: float = 0.0
) -> float:
    """The smallest `better` p-value x could still reach once x has `runs_x` runs and y
    `runs_y`, if every run still to come goes x's way: x's new runs above every score so far
    and y's below every one, on every task. Why: a race that cannot reach its level even so
    has lost whatever its remaining seeds return; training them buys nothing (a curtailed
    race).

    Ties among the new runs are tried in every pattern (tied new runs share midranks, which
    changes the null distribution: a finish with ties can lie a split or two below the one
    without). With one task and no ties no finish lies below it (tests/test_permutation.py).
    A finish whose new runs tie with scores so far, or, with several tasks, order differently
    on each, can (brute force over every finish of small cases with up to 5 new scores: 40%
    below at most with one task, 4x with two). So it is the best *ordinal* finish, not a bound
    on every finish; a race stopped by it keeps the incumbent, so the run's chance of a false
    BETTER is untouched, and what it risks is a rare win.

    Args:
        x: (runs x tasks) finite scores of the challenger so far.
        y: (runs x tasks) finite scores of the other side so far, on the same tasks.
        runs_x, runs_y: the runs each side will have (at least what it has).
        enough: a p-value at which to stop looking (the first finish at or below it is
            returned): a race only asks whether its level can be reached. 0: the smallest.

    Returns:
        The smallest p-value over those finishes, in (0, 1] (or the first at most `enough`).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    new_x, new_y = int(runs_x) - x.shape[0], int(runs_y) - y.shape[0]
    if new_x < 0 or new_y < 0:
        raise ValueError(f"{x.shape[0]} and {y.shape[0]} runs cannot finish at {runs_x}, {runs_y}")
    pooled = np.vstack([x, y])
    top, bottom = pooled.max(axis=0) + 1.0, pooled.min(axis=0) - 1.0
    best = 1.0
    for ties_x in _tie_patterns(new_x):
        for ties_y in _tie_patterns(new_y):
            ours = np.vstack([x, _stacked(ties_x, top, +1.0)])
            theirs = np.vstack([y, _stacked(ties_y, bottom, -1.0)])
            best = min(best, permutation_p_values(ours, theirs).better)
            if best <= enough:
                return best
    return best


def _tie_patterns(runs: int, largest: int | None = None):
    """Every way to tie `runs` exchangeable runs: the integer partitions of `runs`."""
    if runs == 0:
        yield ()
        return
    for size in range(min(runs, largest or runs), 0, -1):
        for rest in _tie_patterns(runs - size, size):
            yield (size, *rest)


def _stacked(pattern: tuple[int, ...], start: np.ndarray, step: float) -> np.ndarray:
    """Rows for a tie pattern: group k is `start + k * step` on every task, repeated."""
    rows = [start + k * step for k, size in enumerate(pattern) for _ in range(size)]
    return np.array(rows).reshape(-1, start.shape[0])
