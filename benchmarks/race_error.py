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
(`statistics.race_confidence`, error 0.05).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from metarl.evaluation import statistics

SPREAD = 0.15


def one_race(
    rng, effect: float, confidence: float, step: int, cap: int, envs: int
) -> tuple[str, int]:
    """A race's verdict and the seeds the challenger used."""
    incumbent = np.empty((0, envs))
    challenger = np.empty((0, envs))
    while True:
        incumbent = np.vstack([incumbent, rng.normal(1.0, SPREAD, (step, envs))])
        challenger = np.vstack(
            [challenger, rng.normal(1.0 + effect * SPREAD, SPREAD, (step, envs))]
        )
        decision = statistics.race(
            incumbent, {"c": challenger}, max_runs=cap, confidence=confidence
        )
        verdict = decision.verdicts["c"]
        if verdict != statistics.UNDECIDED:
            return verdict, challenger.shape[0]


def simulate(args, effect: float, spent: bool) -> tuple[float, float, float]:
    """(share of runs with any BETTER, share of races won, mean seeds per race)."""
    rng = np.random.default_rng(args.rng_seed)
    looks = -(-args.cap // args.round)
    runs_with_better, won, seeds = 0, 0, 0
    for _ in range(args.runs):
        any_better = False
        for number in range(1, args.races + 1):
            confidence = statistics.race_confidence(number, looks, args.error) if spent else 0.95
            verdict, used = one_race(rng, effect, confidence, args.round, args.cap, args.envs)
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
    args = parser.parse_args()
    print(f"machine: {platform.node()} ({os.cpu_count()} cores); {args}")
    print("| design | challenger | runs with a BETTER | races won | seeds per race | s |")
    print("|---|---|---|---|---|---|")
    for spent in (False, True):
        design = f"run error {args.error:g} spent" if spent else "0.95 per look"
        for effect in (0.0, args.effect):
            start = time.perf_counter()
            share, won, seeds = simulate(args, effect, spent)
            name = "as good (null)" if effect == 0 else f"+{effect:g} spread better"
            print(
                f"| {design} | {name} | {share:.3f} | {won:.3f} | {seeds:.1f} | "
                f"{time.perf_counter() - start:.0f} |"
            )


if __name__ == "__main__":
    main()
