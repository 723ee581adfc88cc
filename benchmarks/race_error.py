"""How often a run's validation races call a challenger BETTER by luck, and how often they find
a real improvement: discovery's race against the designs it replaced, on the same draws.

    python benchmarks/race_error.py                      # 200 simulated runs of 10 races
    python benchmarks/race_error.py --runs 500 --races 20
    python benchmarks/race_error.py --envs 1 --cap 8 --effect 2   # minatar-cpu's races

Each simulated run holds `--races` races run as discovery runs them (discovery/races.py: a look
after every round of `--round` fresh seeds per side, up to `--cap` seeds). Scores are drawn per
seed and env from a normal distribution with a per-env spread like the demo's validation scores
(sd 0.15 around 1.0), on `--envs` validation envs (the demo's 2; `minatar-cpu` validates on
Seaquest alone). Each race draws its scores round by round from its own random stream, so
the designs see the same scores (entries in RESULTS.md before 2026-12-01 drew every race of a
run from one stream). Under the null the challenger is drawn like the incumbent: any BETTER is a
false one. Under an improvement the challenger's mean is `--effect` higher (in units of the
spread). Rows, each design on the same draws:

- "0.95 per look, bootstrap": the first design, BETTER when the 95% bootstrap interval of
  P(challenger > incumbent) lies above 0.5 (`statistics.compare`);
- "error spent, bootstrap": the second, the same interval at the confidence that spends the
  run's error (`--error`) over races as 6 / (pi^2 r^2) and evenly over a race's looks;
- "discovery: exact test, race_plan": the race now (`statistics.race` at
  `statistics.race_plan`'s levels: an exact permutation test, the share spent only on looks that
  can call BETTER, and more rounds for a race that could not be won at `--cap`);
- "discovery, curtailed": the same, and a race stops as UNWINNABLE when no later look could
  call BETTER even if every run still to come went the challenger's way (`later`).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from metarl.evaluation import statistics

SPREAD = 0.15
DESIGNS = (
    "0.95 per look, bootstrap",
    "error spent, bootstrap",
    "discovery: exact test, race_plan",
    "discovery, curtailed",
)


def bootstrap_look(challenger, incumbent, confidence: float, cap: int) -> str:
    """A look decided by the bootstrap interval (the designs discovery replaced)."""
    verdict = statistics.compare(challenger, incumbent, confidence=confidence).verdict
    if verdict == statistics.UNDECIDED and challenger.shape[0] >= cap:
        return statistics.TIE
    return verdict


def one_race(rng, args, effect: float, design: int, number: int) -> tuple[str, int]:
    """A race's verdict and the seeds the challenger used, under `DESIGNS[design]`."""
    looks = -(-args.cap // args.round)
    share = args.error * 6.0 / (np.pi**2 * number**2)
    plan = statistics.race_plan(number, args.round, args.cap, args.error)
    cap = plan.cap if design >= 2 else args.cap
    incumbent = np.empty((0, args.envs))
    challenger = np.empty((0, args.envs))
    while True:
        incumbent = np.vstack([incumbent, rng.normal(1.0, SPREAD, (args.round, args.envs))])
        challenger = np.vstack(
            [challenger, rng.normal(1.0 + effect * SPREAD, SPREAD, (args.round, args.envs))]
        )
        runs = challenger.shape[0]
        if design == 0:
            verdict = bootstrap_look(challenger, incumbent, 0.95, cap)
        elif design == 1:
            verdict = bootstrap_look(challenger, incumbent, 1.0 - 2.0 * share / looks, cap)
        else:
            later = plan.later(runs) if design == 3 else None
            decision = statistics.race(
                incumbent, {"c": challenger}, max_runs=cap, level=plan.level(runs), later=later
            )
            verdict = decision.verdicts["c"]
        if verdict != statistics.UNDECIDED:
            return verdict, runs


def simulate(args, effect: float, design: int) -> tuple[float, float, float]:
    """(share of runs with any BETTER, share of races won, mean seeds per race). Each race
    draws from its own stream (`--rng-seed`, run, race), so every design sees the same scores
    round by round and designs differ only in where they stop and what they call."""
    runs_with_better, won, seeds = 0, 0, 0
    for index in range(args.runs):
        any_better = False
        for number in range(1, args.races + 1):
            rng = np.random.default_rng([args.rng_seed, index, number])
            verdict, used = one_race(rng, args, effect, design, number)
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
        "--designs", default="0,1,2,3", help="which designs, by index: " + "; ".join(DESIGNS)
    )
    args = parser.parse_args()
    print(f"machine: {platform.node()} ({os.cpu_count()} cores); {args}")
    print("| design | challenger | runs with a BETTER | races won | seeds per race | s |")
    print("|---|---|---|---|---|---|")
    for design in (int(d) for d in args.designs.split(",")):
        for effect in (0.0, args.effect):
            start = time.perf_counter()
            share, won, seeds = simulate(args, effect, design)
            name = "as good (null)" if effect == 0 else f"+{effect:g} spread better"
            print(
                f"| {DESIGNS[design]} | {name} | {share:.3f} | {won:.3f} | {seeds:.1f} | "
                f"{time.perf_counter() - start:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
