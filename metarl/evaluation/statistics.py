"""Statistics for selection that generalises: aggregate scores, and comparisons between
candidates, with intervals over training seeds.

Why: a discovery loop evaluates many candidates on a few seeds and keeps the best. The best of
many noisy scores is biased upwards (the winner's curse): a candidate that drew lucky seeds
beats the incumbent on its point estimate and then fails to repeat it. Selection should
replace an incumbent only when the improvement survives the seed-to-seed spread, and should
spend fresh seeds where the answer is still open. This module gives the numbers for that,
following Agarwal et al. 2021, "Deep reinforcement learning at the edge of the statistical
precipice" (NeurIPS), through their library rliable:

- the interquartile mean (IQM) over all runs and tasks: robust to a few outlier runs (unlike
  the mean) yet using half the data (unlike the median);
- stratified bootstrap confidence intervals: runs are resampled with replacement *within each
  task*, so every resample keeps the suite's tasks and only the seeds vary; the interval
  measures what a repeat of the experiment with other seeds on the same tasks could give;
- the probability of improvement P(X > Y): for each task, the chance that a run of X scores
  above a run of Y (the Mann-Whitney U statistic over all run pairs, ties counted 1/2,
  divided by the number of pairs), averaged over tasks. It asks "how often is X better",
  not "by how much", so one task with a large scale cannot dominate the decision.

Conventions. A score matrix is a (runs x tasks) array of normalised scores
(`metarl.rl.scoring`): row i is training seed i, column t is environment t, rliable's
layout. Every score must be finite: a NaN or infinite score raises ValueError naming where it
is, rather than being dropped, since dropping would silently give tasks different numbers of
runs (an environment whose normalised score is undefined should be left out whole, as a
column). An interval needs at least two runs: with one run per task there is no spread to
resample and a zero-width interval would claim certainty, so `low` and `high` are None.

The point estimates are rliable's own (`rliable.metrics.aggregate_iqm`,
`rliable.metrics.probability_of_improvement`). The bootstrap is rliable's stratified
bootstrap with percentile intervals (`rliable.library.StratifiedBootstrap` for IQM,
`StratifiedIndependentBootstrap` for PoI, `get_interval_estimates(method="percentile")`),
re-implemented here, vectorised, for two reasons: `rliable.library` imports arch < 8, which
fails to import under pandas 3 (arch 7.2 calls pandas' `deprecate_kwarg` with its pre-3.0
signature), and rliable 1.2 draws its resampling indices from numpy's global random state
whatever `random_state` it is given, so its intervals are not reproducible from a seed
argument. Here the resampling takes an explicit seed with a fixed default (the one
`metarl.rl.scoring` uses): the same archived numbers always give the same interval.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, TypeAlias

import numpy as np
import rliable.metrics
import scipy.stats

from metarl.evaluation import permutation
from metarl.rl.scoring import BOOTSTRAP_CONFIDENCE, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED

# (runs x tasks) normalised scores; anything `np.asarray` makes into that shape is accepted
ScoreMatrix: TypeAlias = np.ndarray

# What a comparison or a race can conclude about a challenger against the incumbent
BETTER, WORSE, UNDECIDED, TIE = "better", "worse", "undecided", "tie"
# a race no later look can win, whatever its remaining seeds return (`race`'s `later`)
UNWINNABLE = "unwinnable"
VERDICTS = (BETTER, WORSE, UNDECIDED, TIE, UNWINNABLE)

# P(X > Y) when X and Y are indistinguishable; a significant improvement excludes it
NO_IMPROVEMENT = 0.5

# a race stops a contender whose exact one-sided p-value of being worse is at most this: the
# bootstrap's nominal one-sided error. It spends none of the run's error (it can only keep the
# incumbent), and 1/70, the smallest p at 4 runs a side, lies below it: a clear loser stops
# after one round
FUTILITY = (1.0 - BOOTSTRAP_CONFIDENCE) / 2.0


class Estimate(NamedTuple):
    """A point estimate and its bootstrap confidence interval; `low` and `high` are None when
    there is nothing to resample (a single run)."""

    point: float
    low: float | None
    high: float | None


class Comparison(NamedTuple):
    """A challenger against an incumbent: P(challenger > incumbent) with its interval, and
    what it concludes (`verdict`): BETTER, WORSE or UNDECIDED."""

    poi: Estimate
    verdict: str


class RaceDecision(NamedTuple):
    """One look at a race: for each contender (in the order given) its verdict (one of
    VERDICTS), its probability of improvement over the incumbent with the bootstrap interval,
    and the exact p-value that decided BETTER."""

    verdicts: dict[str, str]
    poi: dict[str, Estimate]
    p_better: dict[str, float]  # the exact test's p-value (`permutation`), which decides

    @property
    def to_run(self) -> list[str]:
        """The contenders that need more seeds (verdict UNDECIDED)."""
        return [name for name, verdict in self.verdicts.items() if verdict == UNDECIDED]


def score_matrix(scores, what: str = "scores") -> ScoreMatrix:
    """`scores` as a (runs x tasks) float array, checked.

    Args:
        scores: a (runs x tasks) array-like of normalised scores.
        what: its name in error messages.

    Returns:
        The float array.

    Raises:
        ValueError: not two-dimensional, no runs or no tasks, or a non-finite score (named
            by run and task).
    """
    matrix = np.asarray(scores, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(
            f"{what} has shape {matrix.shape}, not (runs, tasks); for one task's runs use "
            "np.reshape(values, (-1, 1))"
        )
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"{what} has shape {matrix.shape}: it needs a run and a task at least")
    bad = np.argwhere(~np.isfinite(matrix))
    if bad.size:
        run, task = bad[0]
        raise ValueError(
            f"{what} has {len(bad)} non-finite score(s), the first {matrix[run, task]} at run "
            f"{run}, task {task}: leave out a task whose score is undefined, or the run"
        )
    return matrix


def from_per_task(per_task) -> ScoreMatrix:
    """A score matrix from per-task lists of per-run scores, `scoring.bootstrap_interval`'s
    layout (`per_task[t][i]` is task t's score with run i): the transpose, checked.

    Args:
        per_task: one sequence of per-run scores per task, all of the same length.

    Returns:
        The (runs x tasks) matrix.

    Raises:
        ValueError: tasks with different numbers of runs, or as `score_matrix`.
    """
    lengths = {len(values) for values in per_task}
    if len(lengths) > 1:
        raise ValueError(f"tasks have different numbers of runs: {sorted(lengths)}")
    return score_matrix(np.asarray(per_task, dtype=float).T)


def iqm_interval(
    scores: ScoreMatrix,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = BOOTSTRAP_CONFIDENCE,
    rng_seed: int = BOOTSTRAP_SEED,
) -> Estimate:
    """The interquartile mean over all runs and tasks, with a stratified-bootstrap interval.

    The IQM is the mean of the middle 50% of all run x task scores pooled (rliable's
    `aggregate_iqm`: a 25% trimmed mean; the plain mean below four scores). Each bootstrap
    resample draws, for every task independently, as many runs as there are with
    replacement from that task's own runs; the interval is the percentile interval of the
    resampled IQMs.

    Args:
        scores: (runs x tasks) normalised scores.
        resamples: bootstrap resamples (memory grows as resamples x runs x tasks).
        confidence: the interval's coverage, in (0, 1).
        rng_seed: seeds the resampling; fixed by default so the interval is reproducible.

    Returns:
        Estimate(point, low, high); low and high are None with a single run.

    Raises:
        ValueError: a malformed or non-finite matrix (`score_matrix`), or bad settings.
    """
    matrix = score_matrix(scores)
    _check_settings(resamples, confidence)
    point = float(rliable.metrics.aggregate_iqm(matrix))
    runs, tasks = matrix.shape
    if runs < 2:
        return Estimate(point, None, None)
    rng = np.random.default_rng(rng_seed)
    index = rng.integers(0, runs, size=(resamples, runs, tasks))
    resampled = matrix[index, np.arange(tasks)]  # row index drawn within each task's column
    values = scipy.stats.trim_mean(resampled.reshape(resamples, -1), 0.25, axis=1)
    return Estimate(point, *_percentile_interval(values, confidence))


def probability_of_improvement(
    x: ScoreMatrix,
    y: ScoreMatrix,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = BOOTSTRAP_CONFIDENCE,
    rng_seed: int = BOOTSTRAP_SEED,
) -> Estimate:
    """P(X > Y): how likely a run of algorithm x beats a run of y on a task, averaged over tasks.

    For each task, the fraction of (run of x, run of y) pairs where x scores higher, a tie
    counting 1/2 (the Mann-Whitney U statistic over the number of pairs); then the mean over
    tasks (rliable's `probability_of_improvement`). 0.5 means no difference; above 0.5 favours
    x. The interval is a stratified bootstrap that resamples x's runs and y's runs
    independently within each task (rliable's `StratifiedIndependentBootstrap`): the two
    were trained separately, so their seeds are not paired.

    Args:
        x: (runs_x x tasks) normalised scores of the challenger.
        y: (runs_y x tasks) normalised scores of the other, on the same tasks in the same
            order; the numbers of runs may differ.
        resamples: bootstrap resamples.
        confidence: the interval's coverage, in (0, 1).
        rng_seed: seeds the resampling; fixed by default so the interval is reproducible.

    Returns:
        Estimate(point, low, high), all in [0, 1]; low and high are None when x or y has a
        single run (that side's spread over seeds is unknown).

    Raises:
        ValueError: malformed or non-finite matrices, different numbers of tasks, or bad
            settings.
    """
    x, y = score_matrix(x, "x"), score_matrix(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"x has {x.shape[1]} task(s) and y {y.shape[1]}: compare them on the same tasks"
        )
    _check_settings(resamples, confidence)
    point = float(rliable.metrics.probability_of_improvement(x, y))
    (runs_x, tasks), runs_y = x.shape, y.shape[0]
    if runs_x < 2 or runs_y < 2:
        return Estimate(point, None, None)
    # wins[t, i, j]: 1 when run i of x beats run j of y on task t, 1/2 for a tie, else 0. A
    # resample's P(X > Y) on a task is then counts_x @ wins @ counts_y / (runs_x * runs_y),
    # where counts are how often each run was drawn: exact, without building the resamples.
    wins = (x.T[:, :, None] > y.T[:, None, :]) + 0.5 * (x.T[:, :, None] == y.T[:, None, :])
    rng = np.random.default_rng(rng_seed)
    counts_x = _draw_counts(rng, runs_x, resamples, tasks)
    counts_y = _draw_counts(rng, runs_y, resamples, tasks)
    per_task = np.einsum("rti,tij,rtj->rt", counts_x, wins, counts_y, optimize=True)
    values = per_task.mean(axis=1) / (runs_x * runs_y)
    return Estimate(point, *_percentile_interval(values, confidence))


def verdict(poi: Estimate) -> str:
    """What a probability of improvement with its interval concludes about the challenger.

    BETTER when the whole interval lies above 0.5 (low > 0.5), WORSE when it lies below
    (high < 0.5), UNDECIDED when it contains 0.5 or there is no interval (a single run).

    Args:
        poi: P(challenger > incumbent), from `probability_of_improvement`.

    Returns:
        BETTER, WORSE or UNDECIDED.
    """
    if poi.low is None or poi.high is None:
        return UNDECIDED
    if poi.low > NO_IMPROVEMENT:
        return BETTER
    if poi.high < NO_IMPROVEMENT:
        return WORSE
    return UNDECIDED


def compare(
    challenger: ScoreMatrix,
    incumbent: ScoreMatrix,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = BOOTSTRAP_CONFIDENCE,
    rng_seed: int = BOOTSTRAP_SEED,
) -> Comparison:
    """P(challenger > incumbent) with its interval, and its `verdict`.

    Args:
        challenger: (runs x tasks) normalised scores of the candidate.
        incumbent: (runs x tasks) normalised scores of the one it would replace.
        resamples, confidence, rng_seed: as in `probability_of_improvement`.

    Returns:
        Comparison(poi, verdict).
    """
    poi = probability_of_improvement(
        challenger, incumbent, resamples=resamples, confidence=confidence, rng_seed=rng_seed
    )
    return Comparison(poi, verdict(poi))


def significantly_better(
    challenger: ScoreMatrix,
    incumbent: ScoreMatrix,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = BOOTSTRAP_CONFIDENCE,
    rng_seed: int = BOOTSTRAP_SEED,
) -> bool:
    """Whether the challenger's improvement over the incumbent is significant.

    The rule: the lower end of the `confidence` interval of P(challenger > incumbent) is
    above 0.5. A single run on either side is never significant (no interval).

    Args:
        challenger, incumbent, resamples, confidence, rng_seed: as in `compare`.

    Returns:
        True when the challenger is significantly better.
    """
    comparison = compare(
        challenger, incumbent, resamples=resamples, confidence=confidence, rng_seed=rng_seed
    )
    return comparison.verdict == BETTER


def race(
    incumbent_scores: ScoreMatrix,
    contenders: Mapping[str, ScoreMatrix],
    *,
    max_runs: int,
    level: float,
    later: Mapping[int, float] | None = None,
    futility: float = FUTILITY,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = BOOTSTRAP_CONFIDENCE,
    rng_seed: int = BOOTSTRAP_SEED,
) -> RaceDecision:
    """One look at a race: each contender against the incumbent on the scores so far.

    An exact permutation test of P(contender > incumbent) decides (`permutation`): BETTER when
    its p-value is at most `level`, WORSE when the opposite one-sided p-value is at most
    `futility` (stop spending seeds on it), otherwise UNDECIDED (give it more fresh seeds)
    unless it already has `max_runs` runs, then TIE (the budget cannot tell them apart), or
    no look in `later` could call it BETTER even if every run still to come went its way, then
    UNWINNABLE (`permutation.best_finish_p`: its remaining seeds would buy nothing). The
    bootstrap interval of P(contender > incumbent) is returned to be shown, not to decide: at
    4-12 runs it is too narrow to carry a stated error (the permutation module says how much).
    A pure decision: the caller draws the seeds, trains, and calls again with the grown
    matrices; a contender's verdict does not depend on the others.

    Every look is a fresh test at `level`: `race_plan` gives the levels that hold a whole
    run's chance of any lucky BETTER below a stated rate. WORSE needs no such share: stopping
    a contender can only keep the incumbent; nor does UNWINNABLE. Replayed on minatar-cpu's
    long run (`benchmarks/race_replay.py`), it stops 7 of its 8 races after the first of two
    rounds (the eighth stopped there as WORSE), each keeping the incumbent as before; simulated
    at that design (`race_error.py --envs 1 --cap 8`), 5.1 seeds a race instead of 7.9 when the
    challenger is no better, and the same races won when it is (RESULTS.md).

    Args:
        incumbent_scores: (runs x tasks) normalised scores of the incumbent.
        contenders: name -> (runs x tasks) normalised scores, on the incumbent's tasks.
        max_runs: the most runs a contender may get; at least 2.
        level: this look's chance of calling BETTER a contender that is no better, in [0, 1)
            (0: this look cannot call BETTER).
        later: the looks still to come, runs a side -> level (the race plan's levels past
            this look); at each the incumbent has at least as many runs. None: no curtailing.
        futility: the p-value at or below which a contender is called WORSE, in [0, 1).
        resamples, confidence, rng_seed: the shown interval's, as in
            `probability_of_improvement`.

    Returns:
        RaceDecision(verdicts, poi, p_better), in the contenders' order.

    Raises:
        ValueError: max_runs below 2, a level outside [0, 1), or as
            `probability_of_improvement`.
    """
    if max_runs < 2:
        raise ValueError(f"max_runs is {max_runs}: a race needs at least 2 runs for an interval")
    for name, value in (("level", level), ("futility", futility)):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} is {value}: a chance in [0, 1)")
    incumbent = score_matrix(incumbent_scores, "incumbent_scores")
    verdicts, pois, p_better = {}, {}, {}
    for name, scores in contenders.items():
        challenger = score_matrix(scores, f"contender {name!r}")
        poi = probability_of_improvement(
            challenger, incumbent, resamples=resamples, confidence=confidence, rng_seed=rng_seed
        )
        p = permutation.permutation_p_values(challenger, incumbent)
        if p.better <= level:
            outcome = BETTER
        elif p.worse <= futility:
            outcome = WORSE
        elif challenger.shape[0] >= max_runs:
            outcome = TIE
        elif later is not None and not winnable(challenger, incumbent, later):
            outcome = UNWINNABLE
        else:
            outcome = UNDECIDED
        verdicts[name], pois[name], p_better[name] = outcome, poi, p.better
    return RaceDecision(verdicts, pois, p_better)


def winnable(challenger: ScoreMatrix, incumbent: ScoreMatrix, later: Mapping[int, float]) -> bool:
    """Whether some later look could still call the challenger BETTER, were every run still to
    come to go its way (`permutation.best_finish_p`).

    Args:
        challenger, incumbent: (runs x tasks) scores so far.
        later: runs a side -> level of each look still to come (a level of 0 cannot call it).

    Returns:
        True when the best finish reaches its look's level at one of them at least.
    """
    for runs, level in sorted(later.items()):
        if level <= 0 or runs <= challenger.shape[0]:
            continue
        theirs = max(int(runs), incumbent.shape[0])
        if permutation.best_finish_p(challenger, incumbent, runs, theirs, enough=level) <= level:
            return True
    return False


class RacePlan(NamedTuple):
    """How a run's race spends its share of the run's error.

    `levels[runs]` is the level the look at `runs` runs a side is tested at (0: that look
    cannot call BETTER; it may still stop a WORSE contender); `cap` is the most runs a side
    gets (a TIE there)."""

    cap: int
    levels: dict[int, float]

    def level(self, runs: int) -> float:
        """The level of the look at `runs` runs (0 for a look the plan did not foresee)."""
        return self.levels.get(int(runs), 0.0)

    def later(self, runs: int) -> dict[int, float]:
        """The looks after the one at `runs` runs, runs -> level (`race`'s `later`)."""
        return {n: level for n, level in self.levels.items() if n > int(runs)}


def race_plan(race_number: int, round_seeds: int, race_seeds: int, error_rate: float) -> RacePlan:
    """The levels of a run's `race_number`-th race, so that the chance that the whole run ever
    calls a challenger BETTER by luck stays below `error_rate`, and its cap.

    Why: a run races again after every generation that nominates a challenger, and each race
    looks after every round of fresh seeds. The run's error is spent over races as
    error_rate * 6 / (pi^2 r^2) (r = 1, 2, ...: the shares sum to error_rate however many
    races a run holds, so a resumed or extended run stays within it), and a race's share is
    split evenly over the looks that can call BETTER (Bonferroni: valid for any dependence
    between looks). A look at n runs a side cannot when its level is below the exact test's
    smallest p-value, 1 / C(2n, n) (`permutation.smallest_p`); spending on it would be waste,
    so the share goes to the latest looks that can, as many as can share it. When not even the
    last look at `race_seeds` can, the race gets more rounds until it can: a late race must
    stay winnable. At minatar-cpu's design (rounds of 4, a cap of 8, error 0.05): race 1 looks
    at 4 and 8 runs at 0.0152 each, races 2-19 only at 8 (level 0.0304 / r^2), race 20 on
    runs to 12; at the demo's (cap 12): race 1 at 8 and 12 runs, 0.0152 each.

    Args:
        race_number: 1 for the run's first race, 2 for its second, ...
        round_seeds: fresh seeds a side gets per round (a look after each).
        race_seeds: the most runs a side gets unless the race cannot be won by then.
        error_rate: the run's tolerated chance of any false BETTER, in (0, 1).

    Returns:
        RacePlan(cap, levels) with a look every `round_seeds` runs up to the cap.

    Raises:
        ValueError: race_number or round_seeds below 1, or error_rate outside (0, 1).
    """
    if race_number < 1 or round_seeds < 1:
        raise ValueError(f"race {race_number} in rounds of {round_seeds}: both must be at least 1")
    if not 0.0 < error_rate < 1.0:
        raise ValueError(f"error_rate is {error_rate}: it must lie strictly between 0 and 1")
    share = error_rate * 6.0 / (np.pi**2 * race_number**2)
    rounds = max(1, -(-int(race_seeds) // round_seeds))
    while True:
        looks = [round_seeds * k for k in range(1, rounds + 1)]
        for first in range(rounds):
            spending = looks[first:]
            level = share / len(spending)
            if permutation.smallest_p(spending[0], spending[0]) <= level:
                levels = {runs: (level if runs in spending else 0.0) for runs in looks}
                return RacePlan(looks[-1], levels)
        rounds += 1


def _check_settings(resamples: int, confidence: float) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)):
        raise ValueError(f"resamples is {resamples!r}, not a whole number")
    if resamples < 1:
        raise ValueError(f"resamples is {resamples}: it needs at least one")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence is {confidence}: it must lie strictly between 0 and 1")


def _draw_counts(rng: np.random.Generator, runs: int, resamples: int, tasks: int) -> np.ndarray:
    """How often each of `runs` runs is drawn when `runs` runs are drawn with replacement, per
    resample and task independently: shape (resamples, tasks, runs)."""
    index = rng.integers(0, runs, size=(resamples * tasks, runs))
    flat = index + runs * np.arange(resamples * tasks)[:, None]
    counts = np.bincount(flat.ravel(), minlength=resamples * tasks * runs)
    return counts.reshape(resamples, tasks, runs).astype(float)


def _percentile_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The (1 - confidence)/2 and (1 + confidence)/2 percentiles of bootstrap statistics."""
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)
