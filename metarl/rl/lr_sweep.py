"""Learning-rate sweeps: the grid, its parsing, and how a sweep's scores are aggregated.

Why sweep at all: a discovered drift or optimizer can be good at a learning rate other than the
one PPO was tuned for, and scoring it only at PPO's rate penalises it for that. DiscoBench
(Goldie et al. 2026) therefore scores each candidate at its best learning rate out of a sweep.
It picks that rate on the same runs it reports, which is optimistic: the maximum over L noisy
scores is biased upwards, and more so the more rates are swept. metarl separates the two: the
rate is chosen on selection (validation) seeds (`choose_lr`) and the score is reported on fresh
seeds at that rate. `sweep_score` also gives mean-over-LRs, the robust aggregation that
rewards a candidate which works over the whole grid rather than at one lucky rate.

The training itself is one compiled program with the learning rate as an extra vmapped axis
(`training.BatchProgram(..., learning_rates=...)` and `training.run_sweep`); this module is
plain Python over the per-rate scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["SweepScore", "choose_lr", "log_grid", "parse_sweep", "sweep_score"]

# Log-space distances closer than this count as equal when ties are broken (a symmetric grid's
# two rates around the center are equidistant in exact arithmetic, not always in floats).
_LOG_TIE = 1e-9


def log_grid(center: float, count: int, span: float = 10.0) -> tuple[float, ...]:
    """`count` learning rates, log-spaced and centred on `center`.

    The grid is geometric from `center / sqrt(span)` to `center * sqrt(span)`: rate k (of
    0 .. count-1) is `center * span ** (k / (count - 1) - 1/2)`, so the whole grid spans a
    factor `span` and, when `count` is odd, its middle rate is exactly `center`. `count` 1
    gives `(center,)`. E.g. `log_grid(1e-3, 3)` is (3.16e-4, 1e-3, 3.16e-3).

    Args:
        center: the grid's geometric center, e.g. the environment's tuned rate; > 0.
        count: the number of rates; >= 1.
        span: the ratio of the largest to the smallest rate; > 1 (unused when count is 1).

    Returns:
        The rates, ascending.

    Raises:
        ValueError: a count below 1, a non-positive or non-finite center, or a span <= 1.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"a learning-rate grid needs count >= 1, got {count!r}")
    if not (math.isfinite(center) and center > 0):
        raise ValueError(f"a learning-rate grid needs a finite center > 0, got {center!r}")
    if count == 1:
        return (float(center),)
    if not (math.isfinite(span) and span > 1):
        raise ValueError(f"a learning-rate grid needs a finite span > 1, got {span!r}")
    exponents = [k / (count - 1) - 0.5 for k in range(count)]
    return tuple(float(center * span**e) for e in exponents)


def parse_sweep(text: str, center: float) -> tuple[float, ...]:
    """A sweep as the command line gives it.

    A bare integer is a count: `"3"` is `log_grid(center, 3)`. Anything else is a
    comma-separated list of learning rates, returned sorted: `"1e-3,1e-4,3e-4"` is
    (1e-4, 3e-4, 1e-3). A single rate (`"3e-4"`) is a one-point sweep.

    Args:
        text: the sweep.
        center: the grid's center when `text` is a count.

    Returns:
        The learning rates, ascending.

    Raises:
        ValueError: with a one-line message, for an empty sweep, a count below 1, a rate
            that is not a number, not finite or not positive, or a rate given twice.
    """
    text = text.strip()
    if not text:
        raise ValueError("empty learning-rate sweep: give a count (e.g. 5) or rates (1e-4,3e-4)")
    if text.isdigit():
        return log_grid(center, int(text))
    rates = []
    for item in text.split(","):
        item = item.strip()
        try:
            rate = float(item)
        except ValueError:
            raise ValueError(
                f"bad learning rate {item!r} in sweep {text!r}: expected numbers like 3e-4"
            ) from None
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"learning rate {item!r} in sweep {text!r} must be finite and > 0")
        rates.append(rate)
    if len(set(rates)) != len(rates):
        raise ValueError(f"learning-rate sweep {text!r} lists a rate twice")
    return tuple(sorted(rates))


@dataclass(frozen=True)
class SweepScore:
    """One candidate's scores over a learning-rate sweep, and their two aggregations.

    Attributes:
        per_lr: the score at each learning rate (None where undefined: a non-finite score,
            e.g. a run that diverged).
        learning_rates: the swept rates, in the order of `per_lr`.
        best: the best-LR aggregation, the highest defined score (DiscoBench's); None when no
            rate has a score.
        best_lr: the rate that scored `best` (ties broken as in `choose_lr`); None with it.
        mean: the mean-over-LRs aggregation, over every rate; None when any rate's score is
            undefined (a rate that diverges is a failure of the candidate, not a rate to leave
            out: averaging only the defined ones would reward diverging at the hard rates).
    """

    per_lr: tuple[float | None, ...]
    learning_rates: tuple[float, ...]
    best: float | None
    best_lr: float | None
    mean: float | None


def _defined(score: float | None) -> bool:
    return score is not None and math.isfinite(score)


def _check_pairs(
    learning_rates: Sequence[float], scores: Sequence[float | None], what: str
) -> tuple[tuple[float, ...], tuple[float | None, ...]]:
    rates = tuple(float(lr) for lr in learning_rates)
    values = tuple(float(s) if _defined(s) else None for s in scores)
    if not rates:
        raise ValueError(f"{what} needs at least one learning rate")
    if len(rates) != len(values):
        raise ValueError(f"{what}: {len(rates)} learning rates but {len(values)} scores")
    if not all(math.isfinite(lr) and lr > 0 for lr in rates):
        raise ValueError(f"{what}: learning rates must be finite and > 0, got {list(rates)}")
    return rates, values


def _best(rates: tuple[float, ...], values: tuple[float | None, ...]) -> int | None:
    """The position of the highest defined score; ties go to the rate closest to the grid's
    center in log space, then to the smaller rate. None when no score is defined."""
    defined = [i for i, v in enumerate(values) if v is not None]
    if not defined:
        return None
    top = max(values[i] for i in defined)
    tied = [i for i in defined if values[i] == top]
    log_center = 0.5 * (math.log(min(rates)) + math.log(max(rates)))

    def key(i: int) -> tuple[float, float]:
        distance = abs(math.log(rates[i]) - log_center)
        return (round(distance / _LOG_TIE) * _LOG_TIE, rates[i])

    return min(tied, key=key)


def sweep_score(
    learning_rates: Sequence[float], per_lr_scores: Sequence[float | None]
) -> SweepScore:
    """Aggregate a candidate's scores over a sweep: best-LR and mean-over-LRs.

    Args:
        learning_rates: the swept rates.
        per_lr_scores: the score at each rate (None or non-finite: undefined).

    Returns:
        The SweepScore (see its attributes for the aggregations and the undefined cases).

    Raises:
        ValueError: no rates, a length mismatch, or a non-positive rate.
    """
    rates, values = _check_pairs(learning_rates, per_lr_scores, "sweep_score")
    best = _best(rates, values)
    mean = None if None in values else math.fsum(values) / len(values)
    return SweepScore(
        per_lr=values,
        learning_rates=rates,
        best=None if best is None else values[best],
        best_lr=None if best is None else rates[best],
        mean=mean,
    )


def choose_lr(learning_rates: Sequence[float], selection_scores: Sequence[float | None]) -> float:
    """The learning rate to report a candidate at, chosen on selection (validation) seeds.

    The rate with the highest selection score; exact ties go to the rate closest in log space
    to the grid's center (the geometric midpoint of its smallest and largest rates, which is
    the middle rate of an odd `log_grid`): the rate the config was tuned at is the prior
    choice. Rates equally close (the two middle rates of an even grid) go to the smaller, the
    more conservative rate. Undefined scores (None, non-finite) never win.

    Args:
        learning_rates: the swept rates.
        selection_scores: the score at each rate on the selection seeds.

    Returns:
        The chosen rate.

    Raises:
        ValueError: no rates, a length mismatch, a non-positive rate, or no defined score.
    """
    rates, values = _check_pairs(learning_rates, selection_scores, "choose_lr")
    best = _best(rates, values)
    if best is None:
        raise ValueError("choose_lr: no learning rate has a defined selection score")
    return rates[best]
