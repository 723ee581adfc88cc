"""A batch's reference: the baseline's per-seed runs, read back from the baseline cache and
combined into the one `Reference` every candidate of the batch is normalised against."""

from __future__ import annotations

import math
import warnings

import numpy as np

from metarl.evaluation.settings import Reference


def baseline_reference(runs: list[dict], random_return: float) -> Reference:
    """A batch's reference from the baseline's per-seed runs (in the batch's seed order)."""
    # a seed on which no episode ended in the scored window has no return (None): the batch's
    # reference is then undefined (NaN), so its normalised scores are too and a rung decides
    # nothing (measured: Freeway-MinAtar at 1/3 of 2e5 steps)
    returns = [_number(run["final_returns"][0]) for run in runs]
    first = runs[0]
    curves = np.array([_curve(run, "curve") for run in runs], dtype=np.float64)
    with warnings.catch_warnings():  # a point no seed reached is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        curve = np.nanmean(curves, axis=0) if curves.size else np.array([])
        curve_std = np.nanstd(curves, axis=0) if curves.size else np.array([])
    combined = {
        **first,
        "seeds": [int(run["seeds"][0]) for run in runs],
        "final_returns": returns,
        "curve": [float(x) if math.isfinite(x) else None for x in curve],
        "curve_std": [float(x) if math.isfinite(x) else None for x in curve_std],
        "positive_value_loss": [_seed_value(run, "positive_value_loss") for run in runs],
        "adaptation": _seed_curves(runs, "adaptation"),
        "scratch": _seed_curves(runs, "scratch"),
        "compile_s": max(float(run.get("compile_s", 0.0)) for run in runs),
        "run_s": max(float(run.get("run_s", 0.0)) for run in runs),
    }
    return Reference(
        baseline_mean=float(sum(returns) / len(returns)),
        random_mean=float(random_return),
        seconds=combined["compile_s"] + combined["run_s"],
        run=combined,
    )


def _number(value) -> float:
    """A cached per-seed return as a float; NaN for None (no episode ended)."""
    return math.nan if value is None else float(value)


def _seed_value(run: dict, name: str) -> float | None:
    """A one-seed run's per-seed number `name` (its only value), or None when the run has none
    (a baseline cached before the number was recorded) or it is not finite.

    Args:
        run: one seed's EnvRun as a dict (a cached baseline run).
        name: a per-seed list field of EnvRun, e.g. "positive_value_loss".

    Returns:
        The value as a float, or None.
    """
    values = run.get(name) or [None]
    value = values[0]
    return float(value) if value is not None and math.isfinite(value) else None


def _seed_curves(runs: list[dict], name: str) -> list[list[float | None]]:
    """The one-seed runs' per-seed curve `name` (each run's only row), one row per run: a run
    without one (cached before it was recorded) gets a row of None as long as the others'.

    Args:
        runs: one EnvRun dict per seed (cached baseline runs), in the batch's seed order.
        name: a per-seed list-of-curves field of EnvRun: "adaptation" or "scratch".

    Returns:
        The rows, non-finite values as None; [] when no run has the curve (a run without
        one, as PPO's).
    """
    rows = [(run.get(name) or [None])[0] for run in runs]
    points = max((len(row) for row in rows if row is not None), default=0)
    if not points:
        return []
    return [
        [float(v) if v is not None and math.isfinite(v) else None for v in row]
        if row is not None
        else [None] * points
        for row in rows
    ]


def _curve(run: dict, name: str) -> list[float]:
    return [math.nan if x is None else float(x) for x in run.get(name) or []]
