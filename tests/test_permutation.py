"""The exact permutation test of P(X > Y) that decides a race's look
(metarl.evaluation.permutation): its p-values are those of listing every split, and its level
holds exactly."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import rliable.metrics

from metarl.evaluation.permutation import (
    permutation_p_values,
    smallest_p,
    subset_sum_counts,
)


def listed_p_values(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The definition: rliable's P(X > Y) on every split of the pooled runs into |x| and |y|."""
    pooled, n = np.vstack([x, y]), x.shape[0]
    observed = rliable.metrics.probability_of_improvement(x, y)
    stats = []
    for chosen in itertools.combinations(range(len(pooled)), n):
        mask = np.isin(np.arange(len(pooled)), chosen)
        stats.append(rliable.metrics.probability_of_improvement(pooled[mask], pooled[~mask]))
    stats = np.asarray(stats)
    return float(np.mean(stats >= observed - 1e-12)), float(np.mean(stats <= observed + 1e-12))


@pytest.mark.parametrize(("runs_x", "runs_y", "tasks"), [(4, 4, 1), (3, 6, 2), (5, 4, 3)])
def test_p_values_are_those_of_listing_every_split(runs_x, runs_y, tasks):
    rng = np.random.default_rng(runs_x * 10 + runs_y)
    # rounded to one decimal: ties within and across sides, which count 1/2
    x = np.round(rng.normal(0.3, 1.0, size=(runs_x, tasks)), 1)
    y = np.round(rng.normal(0.0, 1.0, size=(runs_y, tasks)), 1)
    assert permutation_p_values(x, y) == pytest.approx(listed_p_values(x, y), abs=1e-12)


def test_no_split_of_a_sample_is_called_better_more_often_than_the_level():
    # the exact level: over every split of one pooled sample (what exchangeable sides make
    # equally likely), the share with p <= alpha is at most alpha
    rng = np.random.default_rng(0)
    pooled = np.round(rng.normal(size=(10, 2)), 1)
    p_values = []
    for chosen in itertools.combinations(range(10), 5):
        mask = np.isin(np.arange(10), chosen)
        p_values.append(permutation_p_values(pooled[mask], pooled[~mask]).better)
    p_values = np.asarray(p_values)
    for alpha in (1 / 252, 0.01, 0.025, 0.05, 0.2, 0.5):
        assert np.mean(p_values <= alpha) <= alpha
    assert np.mean(p_values <= 0.05) > 0.04  # and not far below it: the test spends its level


def test_a_complete_separation_gets_the_smallest_p_value():
    low, high = np.arange(8.0).reshape(-1, 1), np.arange(8.0, 16.0).reshape(-1, 1)
    assert permutation_p_values(high, low).better == smallest_p(8, 8) == 1 / 12870
    assert permutation_p_values(high, low).worse == 1.0
    assert permutation_p_values(low, high).worse == 1 / 12870
    assert smallest_p(4, 4) == 1 / 70 and smallest_p(4, 12) == 1 / 1820


def test_identical_sides_are_never_significant():
    same = np.ones((6, 2))
    assert permutation_p_values(same[:3], same[3:]) == (1.0, 1.0)


def test_subset_sums_count_every_subset_once():
    weights = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    counts = subset_sum_counts(weights, 3)
    assert counts.sum() == math.comb(8, 3)
    listed = np.bincount([sum(c) for c in itertools.combinations(weights, 3)])
    assert np.array_equal(counts[: len(listed)], listed) and not counts[len(listed) :].any()


@pytest.mark.parametrize(
    ("x", "y"),
    [
        (np.ones(3), np.ones((3, 1))),  # not runs x tasks
        (np.ones((3, 1)), np.ones((3, 2))),  # different tasks
        (np.ones((0, 1)), np.ones((2, 1))),  # no runs
        (np.full((2, 1), np.nan), np.ones((2, 1))),
    ],
)
def test_malformed_or_non_finite_scores_are_refused(x, y):
    with pytest.raises(ValueError):
        permutation_p_values(x, y)
