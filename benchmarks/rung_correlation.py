"""How well does a candidate's score early in training predict its final score? (issue 38)

Multi-fidelity evaluation stops candidates at early *rungs* (fractions of the training budget)
when they are clearly losing. That only saves compute without changing the incumbent if the
ranking at a rung agrees with the final ranking. This benchmark reads the learning curves an
archive already holds (every full-budget training evaluation records its return curve) and
prints, per run, environment and rung, the Spearman rank correlation between the candidates'
returns at the rung and their final returns, with a bootstrap 95% interval over candidates, and
whether the final best candidate is still in the top half at the rung (the rule successive
halving applies).

Usage:
    python benchmarks/rung_correlation.py metarl.db                  # every run in the archive
    python benchmarks/rung_correlation.py a.db b.db --rungs 0.11,0.33,0.5 --min-candidates 6

Read-only: nothing is trained and the archives are not written. Each run's candidates were
trained on their own batch's seeds (evaluation/seeds.py), so seed noise between batches is part
of what the correlation measures, as it would be in a generation's decisions.
"""

from __future__ import annotations

import argparse
import platform
from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr

from metarl.archives import Archive


@dataclass(frozen=True)
class Curve:
    """One candidate's training curve on one environment at the full budget."""

    candidate: str
    steps: np.ndarray
    returns: np.ndarray
    final: float  # the evaluation's score: the mean over seeds of the final returns
    total: int  # the run's steps


def at_fraction(curve: Curve, fraction: float) -> float:
    """The curve's return at `fraction` of the run's steps (the last point at or before it).

    Args:
        curve: the candidate's curve.
        fraction: in (0, 1].

    Returns:
        The return there; NaN when the curve has no point that early.
    """
    points = np.flatnonzero(curve.steps <= fraction * curve.total)
    return float(curve.returns[points[-1]]) if points.size else float("nan")


def training_curves(archive: Archive, run_id: str) -> dict[str, list[Curve]]:
    """Every full-budget training curve of run `run_id`, by environment (selection only: the
    validation races and test measurements are other settings)."""
    curves: dict[str, list[Curve]] = {}
    for candidate in archive.run_candidates(run_id):
        for row in archive.evaluations(candidate["id"]):
            wanted = (row["purpose"], row["role"], row["stage"]) == ("selection", "train", "full")
            if not wanted or not row["curve"] or row["mean"] is None:
                continue
            returns = np.array([np.nan if v is None else v for v in row["curve"]], dtype=float)
            curves.setdefault(row["env"], []).append(
                Curve(
                    candidate["id"],
                    np.asarray(row["curve_steps"], dtype=float),
                    returns,
                    float(row["mean"]),
                    int(row["total_timesteps"]),
                )
            )
    return curves


def rank_agreement(
    curves: list[Curve], fraction: float, resamples: int = 2000, rng_seed: int = 0
) -> tuple[float, float, float, bool]:
    """Spearman's rho between returns at `fraction` and final returns, its bootstrap 95%
    interval over candidates, and whether the final best is in the rung's top half.

    Args:
        curves: one environment's curves (at least 3 with a point at the rung).
        fraction: the rung, as a fraction of the budget.
        resamples: bootstrap resamples.
        rng_seed: seeds the bootstrap.

    Returns:
        (rho, low, high, best_survives).
    """
    early = np.array([at_fraction(c, fraction) for c in curves])
    final = np.array([c.final for c in curves])
    keep = np.isfinite(early) & np.isfinite(final)
    early, final = early[keep], final[keep]
    rho = float(spearmanr(early, final).statistic)
    rng = np.random.default_rng(rng_seed)
    draws = []
    for _ in range(resamples):
        pick = rng.integers(0, early.size, early.size)
        if np.unique(early[pick]).size > 1 and np.unique(final[pick]).size > 1:
            draws.append(spearmanr(early[pick], final[pick]).statistic)
    low, high = np.nanpercentile(draws, [2.5, 97.5]) if draws else (np.nan, np.nan)
    best = int(np.argmax(final))
    survives = int((early > early[best]).sum()) < (early.size + 1) // 2
    return rho, float(low), float(high), survives


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archives", nargs="+", help="archive files (metarl.db)")
    parser.add_argument("--rungs", default="0.111,0.333,0.5", help="fractions of the budget")
    parser.add_argument("--min-candidates", type=int, default=5)
    args = parser.parse_args()
    rungs = [float(r) for r in args.rungs.split(",")]
    print(f"machine: {platform.node()} ({platform.machine()}), rungs {rungs}")
    header = "| archive | run | task/suite | env | n | " + " | ".join(
        f"rho at {r:.2f} [95%] (best kept)" for r in rungs
    )
    print(header + " |")
    print("|" + "---|" * (5 + len(rungs)))
    for path in args.archives:
        with Archive(path, must_exist=True) as archive:
            for run in archive.runs():
                for env, curves in sorted(training_curves(archive, run["id"]).items()):
                    if len(curves) < args.min_candidates:
                        continue
                    cells = []
                    for rung in rungs:
                        rho, low, high, kept = rank_agreement(curves, rung)
                        cells.append(
                            f"{rho:+.2f} [{low:+.2f}, {high:+.2f}] ({'yes' if kept else 'no'})"
                        )
                    where = f"{run['task']}/{run['suite']}"
                    print(
                        f"| {path} | {run['id']} | {where} | {env} | {len(curves)} | "
                        + " | ".join(cells)
                        + " |"
                    )


if __name__ == "__main__":
    main()
