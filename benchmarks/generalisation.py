"""Does the new selection generalise? Today's selection against the validation race (issue 23).

At the demo scale (`metarl discover` defaults: classic suite, 1e5 steps, 2 seeds, 12
children, the offline mutation proposer, the same wall-clock budget), for each run seed:

- **unraced** (`--no-confirm`): a child whose training score beats the incumbent's takes its
  place; the training envs alone decide.
- **raced** (the default protocol `quick`): training scores nominate; the suite's validation
  envs, on fresh seeds, decide in a race (`statistics.race`: more fresh seeds while undecided,
  up to `race_seeds`).

Then each run's incumbent is re-measured with PPO-clip on every role (train, validation,
test) on `--measure-seeds` fresh seeds in one batch (paired with the baseline), so the
unraced and the raced incumbents are judged by the same yardstick, never by the draws that
selected them. A test interval entirely below 1.0 means significantly worse than PPO on
environments the run never saw.

    python benchmarks/generalisation.py                    # 3 run seeds, ~45 min on 2 cores
    python benchmarks/generalisation.py --rng-seeds 1 --budget 4   # a quick look

Prints one table; paste it into benchmarks/RESULTS.md with the machine's name.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path


def _fmt(value, interval=None) -> str:
    if value is None:
        return "—"
    if interval and interval[0] is not None:
        return f"{value:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"
    return f"{value:.2f}"


def run_discovery(selection: str, rng_seed: int, budget: int, max_time: float, folder: Path):
    """One demo-scale run; returns (incumbent id, its code, the run's archive path)."""
    from metarl.archives import Archive
    from metarl.discovery.config import DiscoverConfig
    from metarl.discovery.loop import DiscoveryLoop
    from metarl.discovery.proposers.mutation import MutationProposer

    config = DiscoverConfig(
        budget=budget, rng_seed=rng_seed, max_time=max_time, confirm=selection == "raced"
    )
    incumbent = {}

    def on_event(kind: str, data: dict) -> None:
        if kind == "generation":
            incumbent["id"] = data.get("incumbent")
        if kind == "confirm":
            print(
                f"    race {data['id']}: {data.get('verdict')} after {data.get('runs')} seeds",
                flush=True,
            )

    path = folder / f"{selection}-{rng_seed}.db"
    with Archive(path) as archive:
        result = DiscoveryLoop(archive, config, MutationProposer(), on_event=on_event).run()
        cid = incumbent.get("id") or archive.get_run(result.run_id)["best_id"]
        row = archive.candidate(cid)
    return cid, row["code"], row["name"], path


def measure(codes: list[str], seeds: int):
    """Every role of the classic suite for `codes` and PPO-clip, on fresh seeds, one batch."""
    from metarl.evaluation.cascade import Evaluator
    from metarl.evaluation.settings import CascadeSettings

    settings = CascadeSettings(
        suite="classic",
        seeds=seeds,
        total_timesteps=100_000,
        validation=True,
        heldout=True,
        skip_short=True,
    )
    with Evaluator(settings, workers=1) as evaluator:
        return evaluator.evaluate_batch(codes, "drift")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rng-seeds", default="1,2,3")
    parser.add_argument("--budget", type=int, default=12)
    parser.add_argument("--max-time", type=float, default=540.0)
    parser.add_argument("--measure-seeds", type=int, default=8)
    args = parser.parse_args(argv)
    from metarl.platform import device_description
    from metarl.tasks import get_task

    ppo = next(s.source for s in get_task("drift").seed_programs() if s.name == "ppo_clip")
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for rng_seed in [int(s) for s in args.rng_seeds.split(",")]:
            for selection in ("unraced", "raced"):
                start = time.monotonic()
                print(f"run seed {rng_seed}, {selection} ...", flush=True)
                cid, code, name, _ = run_discovery(
                    selection, rng_seed, args.budget, args.max_time, Path(folder)
                )
                results.append((rng_seed, selection, cid, name, code, time.monotonic() - start))
        print(
            f"re-measuring {len(results)} incumbents on {args.measure_seeds} fresh seeds",
            flush=True,
        )
        outcomes = measure([r[4] for r in results] + [ppo], args.measure_seeds)
    print(f"\n# generalisation: {platform.node()} · {device_description()}")
    print(
        f"demo scale: classic, 1e5 steps, {args.budget} children, max {args.max_time:.0f} s; "
        f"incumbents re-measured on {args.measure_seeds} fresh seeds\n"
    )
    print("| run seed | selection | incumbent | train | validation | test | run s |")
    print("|---|---|---|---|---|---|---|")
    for (rng_seed, selection, cid, name, _, seconds), outcome in zip(results, outcomes):
        cells = (
            [
                _fmt(outcome.fitness, outcome.fitness_ci),
                _fmt(outcome.validation, outcome.validation_ci),
            ]
            + [_fmt(outcome.heldout, outcome.heldout_ci)]
            if outcome.passed
            else [f"failed: {outcome.reason}"] * 3
        )
        print(
            f"| {rng_seed} | {selection} | {cid} {name} | "
            + " | ".join(cells)
            + f" | {seconds:.0f} |"
        )
    ppo_outcome = outcomes[-1]
    print(
        f"| – | PPO-clip | baseline | {_fmt(ppo_outcome.fitness, ppo_outcome.fitness_ci)} | "
        f"{_fmt(ppo_outcome.validation, ppo_outcome.validation_ci)} | "
        f"{_fmt(ppo_outcome.heldout, ppo_outcome.heldout_ci)} | – |"
    )
    below = [
        f"{r[1]} seed {r[0]}"
        for r, o in zip(results, outcomes)
        if o.passed and o.heldout_ci and o.heldout_ci[1] < 1.0
    ]
    print(f"\nsignificantly worse than PPO on test: {', '.join(below) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
