"""How often a run's validation races call a challenger BETTER by luck, and how often they find
a real improvement: a fixed confidence per look against the run's error spent over its races.

    python benchmarks/race_error.py                      # 200 simulated runs of 10 races
    python benchmarks/race_error.py --runs 500 --races 20
    python benchmarks/race_error.py --envs 1 --cap 8 --effect 2   # minatar-cpu's races

Each simulated run holds `--races` races run exactly as discovery runs them
(discovery/loop.py: `statistics.race` after every round of `--round` fresh seeds per side, up
to `--cap` seeds). Scores are drawn per seed and env (2 validation envs) from a normal
distribution with a per-env spread like the demo's validation scores (sd 0.15 around 1.0), on
`--envs` validation envs (the demo's 2; `minatar-cpu` validates on Seaquest alone).
Under the null the challenger is drawn like the incumbent: any BETTER is a false one. Under an
improvement the challenger's mean is `--effect` higher (in units of the spread). Rows: the
design before (0.95 at every look) and the run's error spent over races and looks
(`statistics.race_confidence`, error 0.05), each decided by `statistics.race`'s bootstrap
interval of P(challenger > incumbent); with `--exact`, also by an exact permutation test of the
same P(X > Y) at the same error per look (`exact_verdict`, a candidate design measured here:
every split of the pooled runs into the two sides is enumerated, so its false-BETTER rate per
look is at most its level whatever the scores' distribution, and a small race shows what it can
and cannot resolve: at 4 runs a side the smallest p-value is 1 / C(8, 4) = 1/70).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import platform
import time

import numpy as np

from metarl.evaluation import statistics

SPREAD = 0.15


def one_race(
    rng, effect: float, confidence: float, step: int, cap: int, envs: int, exact: bool = False
) -> tuple[str, int]:
    """A race's verdict and the seeds the challenger used: decided by `statistics.race`, or
    with `exact` by `exact_verdict`."""
    incumbent = np.empty((0, envs))
    challenger = np.empty((0, envs))
    while True:
        incumbent = np.vstack([incumbent, rng.normal(1.0, SPREAD, (step, envs))])
        challenger = np.vstack(
            [challenger, rng.normal(1.0 + effect * SPREAD, SPREAD, (step, envs))]
        )
        if exact:
            verdict = exact_verdict(challenger, incumbent, confidence, cap)
        else:
            decision = statistics.race(
                incumbent, {"c": challenger}, max_runs=cap, confidence=confidence
            )
            verdict = decision.verdicts["c"]
        if verdict != statistics.UNDECIDED:
            return verdict, challenger.shape[0]


@functools.lru_cache(maxsize=None)
def _splits(runs_per_side: int) -> np.ndarray:
    """Every split of 2 x `runs_per_side` pooled runs: (splits x pooled) 0/1, 1 = challenger."""
    pooled = 2 * runs_per_side
    rows = [
        np.isin(np.arange(pooled), chosen)
        for chosen in itertools.combinations(range(pooled), runs_per_side)
    ]
    return np.asarray(rows, dtype=np.float64)


def permutation_p(challenger: np.ndarray, incumbent: np.ndarray) -> tuple[float, float]:
    """Exact one-sided p-values of P(challenger > incumbent) (the mean over envs of the
    Mann-Whitney U over its pairs, as `statistics.probability_of_improvement` estimates it):
    (P(split's statistic >= observed), P(split's statistic <= observed)) over every split of
    the pooled runs, equal sides only."""
    n = challenger.shape[0]
    pooled = np.vstack([challenger, incumbent])  # the observed split: the first n rows
    wins = (pooled[:, None, :] > pooled[None, :, :]) + 0.5 * (
        pooled[:, None, :] == pooled[None, :, :]
    )
    splits = _splits(n)
    # a split's statistic: s @ wins @ (1 - s), wins summed over envs (n x n pairs per env)
    stats = ((splits @ wins.sum(axis=2)) * (1.0 - splits)).sum(axis=1)
    observed = wins[:n, n:, :].sum()
    tol = 1e-9
    return float(np.mean(stats >= observed - tol)), float(np.mean(stats <= observed + tol))


def exact_verdict(
    challenger: np.ndarray, incumbent: np.ndarray, confidence: float, cap: int
) -> str:
    """A look decided by the exact test: BETTER when the upper-tail p-value is at most the
    look's one-sided level (1 - confidence) / 2, WORSE when the lower-tail one is, a TIE at the
    cap, otherwise UNDECIDED."""
    level = (1.0 - confidence) / 2.0
    above, below = permutation_p(challenger, incumbent)
    if above <= level:
        return statistics.BETTER
    if below <= level:
        return statistics.WORSE
    return statistics.TIE if challenger.shape[0] >= cap else statistics.UNDECIDED


def simulate(args, effect: float, spent: bool, exact: bool = False) -> tuple[float, float, float]:
    """(share of runs with any BETTER, share of races won, mean seeds per race)."""
    rng = np.random.default_rng(args.rng_seed)
    looks = -(-args.cap // args.round)
    runs_with_better, won, seeds = 0, 0, 0
    for _ in range(args.runs):
        any_better = False
        for number in range(1, args.races + 1):
            confidence = statistics.race_confidence(number, looks, args.error) if spent else 0.95
            verdict, used = one_race(
                rng, effect, confidence, args.round, args.cap, args.envs, exact
            )
            any_better |= verdict == statistics.BETTER
            won += verdict == statistics.BETTER
            seeds += used
        runs_with_better += any_better
    races = args.runs * args.races
    return runs_with_better / args.runs, won / races, seeds / races


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--races", type=int, default=10)
    parser.add_argument("--round", type=int, default=4, help="seeds per round (confirm_seeds)")
    parser.add_argument("--cap", type=int, default=12, help="seeds per race at most")
    parser.add_argument("--effect", type=float, default=1.0, help="improvement, in spreads")
    parser.add_argument("--envs", type=int, default=2, help="validation envs")
    parser.add_argument("--error", type=float, default=0.05, help="the run's selection error")
    parser.add_argument("--rng-seed", type=int, default=0)
    parser.add_argument(
        "--exact", action="store_true", help="also the exact permutation test (equal sides)"
    )
    args = parser.parse_args()
    print(f"machine: {platform.node()} ({os.cpu_count()} cores); {args}")
    print("| design | challenger | runs with a BETTER | races won | seeds per race | s |")
    print("|---|---|---|---|---|---|")
    designs = [(False, False), (True, False)] + (
        [(False, True), (True, True)] if args.exact else []
    )
    for spent, exact in designs:
        design = f"run error {args.error:g} spent" if spent else "0.95 per look"
        design += ", exact permutation test" if exact else ", bootstrap interval"
        for effect in (0.0, args.effect):
            start = time.perf_counter()
            share, won, seeds = simulate(args, effect, spent, exact)
            name = "as good (null)" if effect == 0 else f"+{effect:g} spread better"
            print(
                f"| {design} | {name} | {share:.3f} | {won:.3f} | {seeds:.1f} | "
                f"{time.perf_counter() - start:.0f} |"
            )


if __name__ == "__main__":
    main()
