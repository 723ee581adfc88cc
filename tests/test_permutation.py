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
    best_finish_p,
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


# -- the best finish: how a race knows it can no longer be won (statistics.race's `later`) ----


def test_with_one_task_and_no_ties_no_finish_reaches_below_the_best_finish():
    """3 challenger runs and 4 incumbent runs so far, each side finishing at 5: every way to
    place the 2 new challenger runs and the 1 new incumbent run among (and beyond) the scores so
    far, without ties, gives a p-value at least that of the finish beyond every score."""
    x, y = np.array([[0.2], [0.5], [0.9]]), np.array([[0.3], [0.4], [0.6], [0.8]])
    slots = [-0.1, 0.25, 0.35, 0.45, 0.55, 0.7, 0.85, 1.0, 1.1]  # one between each pair
    finishes = [
        permutation_p_values(np.vstack([x, [[a], [b]]]), np.vstack([y, [[c]]])).better
        for a, b, c in itertools.permutations(slots, 3)
    ]
    extreme = permutation_p_values(np.vstack([x, [[2.0], [3.0]]]), np.vstack([y, [[-1.0]]]))
    assert min(finishes) == pytest.approx(extreme.better, abs=1e-15)
    # and the best finish, its new runs tied in every pattern, lies at or below them all
    assert best_finish_p(x, y, 5, 5) <= min(finishes)


def test_the_best_finish_puts_new_runs_beyond_every_score_and_tries_their_ties():
    x, y = np.array([[1.0], [3.0], [5.0]]), np.array([[4.0]])
    # the new incumbent runs tied below everything lie one split below the same runs apart
    apart = permutation_p_values(np.vstack([x, [[9.0]]]), np.array([[4.0], [0], [-1], [-2]]))
    tied = permutation_p_values(np.vstack([x, [[9.0]]]), np.array([[4.0], [0], [0], [0]]))
    assert (apart.better, tied.better) == pytest.approx((4 / 70, 3 / 70))
    assert best_finish_p(x, y, 4, 4) == pytest.approx(3 / 70)


def test_a_side_already_complete_finishes_as_it_stands():
    x, y = np.array([[0.1], [0.9]]), np.array([[0.5], [0.6]])
    assert best_finish_p(x, y, 2, 2) == permutation_p_values(x, y).better
    with pytest.raises(ValueError, match="cannot finish"):
        best_finish_p(x, y, 1, 2)
