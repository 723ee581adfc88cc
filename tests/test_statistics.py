"""IQM, probability of improvement, their stratified-bootstrap intervals, and racing
(metarl.evaluation.statistics). Fast: small matrices; the default 2000 resamples except where a
reference loop through rliable's own metric would be slow, and said so there."""

from __future__ import annotations

import numpy as np
import pytest
import rliable.metrics

from metarl.evaluation.statistics import (
    BETTER,
    TIE,
    UNDECIDED,
    UNWINNABLE,
    WORSE,
    Estimate,
    compare,
    from_per_task,
    iqm_interval,
    probability_of_improvement,
    race,
    race_plan,
    significantly_better,
    verdict,
)
from metarl.rl.scoring import interquartile_mean


def column(*values: float) -> np.ndarray:
    """One task's runs as a (runs x 1) matrix."""
    return np.asarray(values, dtype=float).reshape(-1, 1)


def width(estimate: Estimate) -> float:
    return estimate.high - estimate.low


# ---- point estimates


def test_iqm_is_the_mean_of_the_middle_half():
    # 8 runs of one task, shuffled: sorted 0 1 | 2 3 4 5 | 6 100 -> (2 + 3 + 4 + 5) / 4
    scores = column(5.0, 100.0, 0.0, 3.0, 6.0, 2.0, 1.0, 4.0)
    assert iqm_interval(scores).point == pytest.approx(3.5)


def test_iqm_pools_runs_and_tasks_like_scoring():
    scores = np.random.default_rng(7).normal(0.5, 1.0, size=(6, 3))
    expected = interquartile_mean(scores.ravel().tolist())
    assert iqm_interval(scores).point == pytest.approx(expected)
    # and the mean of the middle 50% of the 18 pooled scores, by hand: drop 4 at each end
    assert expected == pytest.approx(np.sort(scores.ravel())[4:14].mean())


def test_probability_of_improvement_counts_pairs_and_half_ties():
    # x > y in 4 of the 9 pairs (1>0, 2>0, 3>0, 3>2), one tie (2=2): (4 + 0.5) / 9
    first_x, first_y = column(1, 2, 3), column(0, 2, 4)
    assert probability_of_improvement(first_x, first_y).point == pytest.approx(0.5)
    # x > y in 5 pairs (3>1 twice, 5>1, 5>3, 5>4), two ties (3=3 twice): (5 + 1) / 9
    second_x, second_y = column(3, 3, 5), column(1, 3, 4)
    assert probability_of_improvement(second_x, second_y).point == pytest.approx(2 / 3)
    # two tasks: the mean of the tasks' probabilities
    x, y = np.hstack([first_x, second_x]), np.hstack([first_y, second_y])
    assert probability_of_improvement(x, y).point == pytest.approx((0.5 + 2 / 3) / 2)
    # different numbers of runs: 4 wins (1>0, 2>0, 3>0, 3>2) and one tie of 6 pairs
    assert probability_of_improvement(column(1, 2, 3), column(2, 0)).point == pytest.approx(4.5 / 6)
    # all pairs won, all lost, all tied: every resample says the same, so the interval too
    assert probability_of_improvement(column(5, 6), column(1, 2)) == Estimate(1.0, 1.0, 1.0)
    assert probability_of_improvement(column(1, 2), column(5, 6)) == Estimate(0.0, 0.0, 0.0)
    assert probability_of_improvement(column(3, 3), column(3, 3, 3)) == Estimate(0.5, 0.5, 0.5)


# ---- intervals


def test_intervals_are_reproducible_for_a_seed_and_depend_on_it():
    rng = np.random.default_rng(1)
    x, y = rng.normal(0.6, 0.3, size=(6, 2)), rng.normal(0.5, 0.3, size=(5, 2))
    assert iqm_interval(x, rng_seed=3) == iqm_interval(x, rng_seed=3)
    assert iqm_interval(x, rng_seed=3) != iqm_interval(x, rng_seed=4)
    assert probability_of_improvement(x, y, rng_seed=3) == probability_of_improvement(
        x, y, rng_seed=3
    )
    assert probability_of_improvement(x, y, rng_seed=3) != probability_of_improvement(
        x, y, rng_seed=4
    )
    # the fixed default seed: the same numbers give the same interval on every call
    assert iqm_interval(x) == iqm_interval(x)


def test_intervals_contain_the_point_and_shrink_with_more_runs():
    rng = np.random.default_rng(0)
    many_x, many_y = rng.normal(0.6, 0.3, size=(64, 2)), rng.normal(0.5, 0.3, size=(64, 2))
    few_x, few_y = many_x[:4], many_y[:4]
    for estimate in (
        iqm_interval(few_x),
        iqm_interval(many_x),
        probability_of_improvement(few_x, few_y),
        probability_of_improvement(many_x, many_y),
    ):
        assert estimate.low < estimate.point < estimate.high
    # the spread of a mean over runs falls as 1/sqrt(runs): 16x the runs, about 1/4 the width
    assert width(iqm_interval(many_x)) < 0.5 * width(iqm_interval(few_x))
    assert width(probability_of_improvement(many_x, many_y)) < 0.5 * width(
        probability_of_improvement(few_x, few_y)
    )


def test_a_wider_confidence_gives_a_wider_interval():
    scores = np.random.default_rng(2).normal(0.0, 1.0, size=(10, 2))
    assert width(iqm_interval(scores, confidence=0.99)) > width(
        iqm_interval(scores, confidence=0.5)
    )


def test_the_bootstrap_resamples_runs_within_each_task():
    # Tasks on very different scales, constant within each task: resampling runs within a
    # task reproduces the same matrix every time, so the interval has no width. Resampling
    # the pooled scores would mix the tasks' counts and swing the IQM across scales.
    scores = np.column_stack([np.zeros(6), np.full(6, 100.0)])
    point = iqm_interval(scores).point
    assert point == pytest.approx(50.0)
    assert iqm_interval(scores) == Estimate(point, point, point)
    pooled = _pooled_iqm_interval(scores)
    assert pooled[1] - pooled[0] > 50  # the design matters: flat pooling says [~0, ~100]


def test_the_iqm_interval_matches_rliables_stratified_bootstrap():
    # rliable.library cannot be imported here (arch 7 under pandas 3), so its
    # StratifiedBootstrap is restated: per resample, a run index for every (run, task) cell,
    # each column resampled from its own task; rliable's own aggregate_iqm on each resample;
    # percentile interval. Monte Carlo error between the two is a few % of the width.
    rng = np.random.default_rng(5)
    scores = np.column_stack(
        [rng.normal(0.0, 1.0, 8), rng.normal(100.0, 10.0, 8), rng.exponential(5.0, 8)]
    )
    runs, tasks = scores.shape
    draw = np.random.default_rng(11)
    reference = [
        rliable.metrics.aggregate_iqm(
            scores[draw.integers(0, runs, size=(runs, tasks)), np.arange(tasks)]
        )
        for _ in range(2000)
    ]
    low, high = np.percentile(reference, [2.5, 97.5])
    ours = iqm_interval(scores)
    tolerance = 0.2 * (high - low)
    assert ours.low == pytest.approx(low, abs=tolerance)
    assert ours.high == pytest.approx(high, abs=tolerance)
    # pooled (unstratified) resampling of the same scores gives a very different interval
    pooled_low, pooled_high = _pooled_iqm_interval(scores)
    assert pooled_high - pooled_low > 3 * (high - low)


def test_the_poi_interval_matches_rliables_independent_stratified_bootstrap():
    # rliable's StratifiedIndependentBootstrap restated: x's and y's runs resampled
    # independently within each task; rliable's own probability_of_improvement on each. 500
    # resamples (Mann-Whitney per task per resample is slow); Monte Carlo error is well
    # within the tolerance.
    rng = np.random.default_rng(6)
    x = np.column_stack([rng.normal(0.6, 0.2, 5), rng.normal(10.0, 3.0, 5)])
    y = np.column_stack([rng.normal(0.5, 0.2, 7), rng.normal(9.0, 3.0, 7)])
    draw = np.random.default_rng(12)
    columns = np.arange(2)
    reference = [
        rliable.metrics.probability_of_improvement(
            x[draw.integers(0, 5, size=(5, 2)), columns],
            y[draw.integers(0, 7, size=(7, 2)), columns],
        )
        for _ in range(500)
    ]
    low, high = np.percentile(reference, [2.5, 97.5])
    ours = probability_of_improvement(x, y)
    tolerance = 0.25 * (high - low)
    assert ours.low == pytest.approx(low, abs=tolerance)
    assert ours.high == pytest.approx(high, abs=tolerance)


def _pooled_iqm_interval(scores: np.ndarray) -> tuple[float, float]:
    """The percentile interval of the IQM when all scores are resampled as one pool."""
    flat = scores.ravel()
    draw = np.random.default_rng(13)
    values = [
        rliable.metrics.aggregate_iqm(flat[draw.integers(0, flat.size, flat.size)])
        for _ in range(2000)
    ]
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


# ---- edge cases


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores_are_refused_with_their_place(bad):
    scores = np.ones((3, 2))
    scores[1, 0] = bad
    with pytest.raises(ValueError, match=r"non-finite.*run 1, task 0"):
        iqm_interval(scores)
    with pytest.raises(ValueError, match=r"^y has 1 non-finite"):
        probability_of_improvement(np.ones((3, 2)), scores)
    with pytest.raises(ValueError, match="contender 'c'"):
        race(np.ones((3, 2)), {"c": scores}, max_runs=4, level=0.01)


def test_malformed_matrices_are_refused():
    with pytest.raises(ValueError, match=r"not \(runs, tasks\)"):
        iqm_interval(np.ones(4))  # one task's runs must be a column
    with pytest.raises(ValueError, match="a run and a task"):
        iqm_interval(np.ones((0, 2)))
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement(np.ones((3, 2)), np.ones((3, 3)))
    with pytest.raises(ValueError, match="confidence"):
        iqm_interval(np.ones((3, 1)), confidence=1.0)
    with pytest.raises(ValueError, match="resamples"):
        iqm_interval(np.ones((3, 1)), resamples=0)


def test_a_single_run_gives_a_point_but_no_interval():
    assert iqm_interval(np.array([[0.2, 0.7]])) == Estimate(pytest.approx(0.45), None, None)
    lone = probability_of_improvement(column(5.0), column(1.0, 2.0))
    assert lone == Estimate(1.0, None, None)
    assert probability_of_improvement(column(5.0, 6.0), column(1.0)).low is None
    # one lucky seed is never significant, however large the gap
    assert verdict(lone) == UNDECIDED
    assert not significantly_better(column(5.0), column(1.0, 2.0))


def test_from_per_task_transposes_scorings_layout():
    matrix = from_per_task([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])  # [task][run]
    assert matrix.shape == (3, 2)
    assert matrix[:, 1].tolist() == [10.0, 20.0, 30.0]
    with pytest.raises(ValueError, match="different numbers of runs"):
        from_per_task([[1.0, 2.0], [1.0]])


# ---- significance and racing


def test_significance_needs_the_whole_interval_above_one_half():
    assert verdict(Estimate(0.7, 0.51, 0.9)) == BETTER
    assert verdict(Estimate(0.6, 0.5, 0.7)) == UNDECIDED  # low must exceed 0.5, not touch it
    assert verdict(Estimate(0.5, 0.3, 0.7)) == UNDECIDED
    assert verdict(Estimate(0.3, 0.1, 0.49)) == WORSE
    rng = np.random.default_rng(3)
    strong, weak = rng.normal(1.0, 0.1, size=(5, 2)), rng.normal(0.0, 0.1, size=(5, 2))
    assert significantly_better(strong, weak)
    assert not significantly_better(weak, strong)
    assert compare(weak, strong).verdict == WORSE


def incumbent_and_contenders() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(4)
    incumbent = rng.normal(0.5, 0.2, size=(8, 3))
    return incumbent, {
        "worse": rng.normal(-1.0, 0.2, size=(3, 3)),  # far below, after only 3 runs
        "close": rng.normal(0.5, 0.2, size=(8, 3)),  # the incumbent's own distribution
        "better": rng.normal(2.0, 0.2, size=(3, 3)),
    }


def test_race_stops_the_worse_keeps_the_better_and_reruns_the_close():
    incumbent, contenders = incumbent_and_contenders()
    decision = race(incumbent, contenders, max_runs=16, level=0.01)
    assert decision.verdicts == {"worse": WORSE, "close": UNDECIDED, "better": BETTER}
    assert decision.to_run == ["close"]
    close = decision.poi["close"]
    assert close.low < 0.5 < close.high
    # "better" beats every incumbent run on every task: the one split of C(11, 3) that does
    assert decision.p_better["better"] == pytest.approx(1 / 165)


def test_race_calls_a_tie_when_the_close_one_has_used_its_runs():
    incumbent, contenders = incumbent_and_contenders()
    decision = race(incumbent, contenders, max_runs=8, level=0.01)  # "close" has 8 runs
    assert decision.verdicts == {"worse": WORSE, "close": TIE, "better": BETTER}
    assert decision.to_run == []


def test_a_look_decides_by_the_exact_p_value_not_the_bootstrap_interval():
    # 4 runs a side, the challenger above every incumbent run: the bootstrap interval of
    # P(better) is [1, 1], yet 1 split in C(8, 4) = 70 is as extreme, p = 1/70
    incumbent, challenger = column(0.1, 0.2, 0.3, 0.4), column(0.5, 0.6, 0.7, 0.8)
    assert compare(challenger, incumbent).poi == Estimate(1.0, 1.0, 1.0)
    below = race(incumbent, {"c": challenger}, max_runs=8, level=0.0142)
    at = race(incumbent, {"c": challenger}, max_runs=8, level=1 / 70)
    assert below.verdicts == {"c": UNDECIDED} and at.verdicts == {"c": BETTER}
    assert race(incumbent, {"c": challenger}, max_runs=8, level=0.0).verdicts == {"c": UNDECIDED}
    # the mirror image stops as WORSE at the futility level, which 1/70 clears
    assert race(challenger, {"c": incumbent}, max_runs=8, level=0.01).verdicts == {"c": WORSE}


def test_a_contenders_verdict_does_not_depend_on_the_others():
    incumbent, contenders = incumbent_and_contenders()
    together = race(incumbent, contenders, max_runs=16, level=0.01)
    alone = race(incumbent, {"close": contenders["close"]}, max_runs=16, level=0.01)
    assert alone.poi["close"] == together.poi["close"]
    assert alone.p_better["close"] == together.p_better["close"]
    with pytest.raises(ValueError, match="max_runs"):
        race(incumbent, contenders, max_runs=1, level=0.01)
    with pytest.raises(ValueError, match="level"):
        race(incumbent, contenders, max_runs=8, level=1.0)


def test_a_runs_races_spend_at_most_its_selection_error_however_many_it_holds():
    plans = [race_plan(r, 4, 8, 0.05) for r in range(1, 20_001)]
    # one-sided error per look, over every look of every race: the union bound
    spent = sum(sum(plan.levels.values()) for plan in plans)
    assert 0.0499 < spent <= 0.05  # all of it, over enough races
    first = plans[0]
    assert first.cap == 8 and first.levels == pytest.approx({4: 0.0304 / 2, 8: 0.0304 / 2}, 1e-2)


def test_a_race_spends_only_on_looks_that_can_call_better():
    # the demo's design (rounds of 4, cap 12): at 4 a side the smallest p-value is 1/70, above
    # a third of race 1's share (0.0101), so the share goes to the looks at 8 and 12
    plan = race_plan(1, 4, 12, 0.05)
    share = 0.05 * 6 / np.pi**2
    assert plan.cap == 12 and plan.levels == pytest.approx({4: 0.0, 8: share / 2, 12: share / 2})
    assert plan.level(4) == 0.0 and plan.level(5) == 0.0  # an unforeseen look spends nothing


def test_a_late_race_gets_the_rounds_it_needs_to_stay_winnable():
    # minatar-cpu's design (rounds of 4, cap 8): 1/C(16, 8) = 1/12870 is the smallest p at 8
    share = lambda r: 0.05 * 6 / (np.pi**2 * r**2)  # noqa: E731
    last_at_eight = max(r for r in range(1, 100) if share(r) >= 1 / 12870)
    assert race_plan(last_at_eight, 4, 8, 0.05).cap == 8
    late = race_plan(last_at_eight + 1, 4, 8, 0.05)
    assert late.cap == 12 and late.levels[12] >= 1 / 2704156  # 1/C(24, 12): winnable
    for plan in (race_plan(r, 4, 8, 0.05) for r in range(1, 2000)):
        best = max(plan.levels.values())
        assert best > 0.0 and best * np.count_nonzero(list(plan.levels.values())) <= 0.05


@pytest.mark.parametrize(("number", "rounds", "error"), [(0, 4, 0.05), (1, 0, 0.05), (1, 4, 1.0)])
def test_a_race_plan_needs_a_race_a_round_and_an_error_rate_below_one(number, rounds, error):
    with pytest.raises(ValueError):
        race_plan(number, rounds, 8, error)


# the long run's race 4 on minatar-cpu (RESULTS.md): the challenger's first 4 Seaquest runs
# against the incumbent's 8 (LPO), with the race's one look that can call BETTER at 8 a side
LONG_RUN_INCUMBENT = column(1.64, 1.64, 0.82, 1.19, 1.47, 1.18, 1.25, 0.52)
LONG_RUN_CHALLENGER = column(1.38, 1.38, 0.85, 0.69)
RACE_4 = race_plan(4, 4, 8, 0.05)


def test_a_race_no_later_look_can_win_stops_as_unwinnable():
    """Even if its 4 remaining runs beat every run so far, its p-value at 8 would be 0.09, far
    above the look's 0.0019: the remaining round could only confirm the loss."""
    assert RACE_4.levels == {4: 0.0, 8: pytest.approx(0.05 * 6 / np.pi**2 / 16)}
    later = RACE_4.later(4)
    assert later == {8: RACE_4.level(8)}
    kept = race(LONG_RUN_INCUMBENT, {"c": LONG_RUN_CHALLENGER}, max_runs=8, level=0.0, later=later)
    assert kept.verdicts == {"c": UNWINNABLE} and kept.to_run == []
    # not WORSE: the futility test alone would have spent the second round on it
    alone = race(LONG_RUN_INCUMBENT, {"c": LONG_RUN_CHALLENGER}, max_runs=8, level=0.0)
    assert alone.verdicts == {"c": UNDECIDED}


def test_a_race_a_later_look_could_still_win_goes_on():
    # the same runs against a look the best finish (p 0.0897) would reach
    loose = race(
        LONG_RUN_INCUMBENT, {"c": LONG_RUN_CHALLENGER}, max_runs=8, level=0.0, later={8: 0.1}
    )
    assert loose.verdicts == {"c": UNDECIDED}
    # a look at 0 or one already behind can never be won: they do not keep a race going
    for later in ({8: 0.0}, {4: 0.5}, {}):
        decision = race(
            LONG_RUN_INCUMBENT, {"c": LONG_RUN_CHALLENGER}, max_runs=8, level=0.0, later=later
        )
        assert decision.verdicts == {"c": UNWINNABLE}


def test_curtailing_never_stops_a_race_its_best_finish_wins():
    """The challenger's 4 runs so far, then its 4 remaining runs above every run and the
    incumbent's 4 below: wherever that finish is BETTER at 8 a side, the look at 4 did not
    call the race UNWINNABLE; and races that finish cannot win were stopped there."""
    incumbent = column(0.8, 0.95, 1.0, 1.1)
    stopped, went_on = 0, 0
    for shift in np.linspace(-0.4, 0.4, 17):
        challenger = incumbent[[2, 0, 3, 1]] + shift + np.array([[0.01], [0.02], [0.03], [0.04]])
        first = race(incumbent, {"c": challenger}, max_runs=8, level=0.0152, later={8: 0.0152})
        top = np.vstack([challenger, np.full((4, 1), 9.0)])
        bottom = np.vstack([incumbent, np.full((4, 1), -9.0)])
        finish = race(bottom, {"c": top}, max_runs=8, level=0.0152).verdicts["c"]
        if finish == BETTER:
            assert first.verdicts["c"] != UNWINNABLE
        stopped += first.verdicts["c"] == UNWINNABLE
        went_on += first.verdicts["c"] == UNDECIDED
    assert stopped and went_on  # both kinds of race were looked at
