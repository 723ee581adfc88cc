"""What the second round of integrity checks costs one demo candidate, phase by phase.

    python benchmarks/integrity_cost.py            # classic, 1e5 steps, 2 pinned seeds (the demo)
    python benchmarks/integrity_cost.py --repeats 3

The drift task's PPO-clip seed is evaluated alone (a batch of one: the worst case, nothing is
shared with batch-mates) through the real cascade, its baselines trained beforehand and the
seeds pinned so that no baseline is trained inside the measured evaluation. Prints the
Outcome's timings: `precheck` (the artifact pre-check in a fresh tracer-type worker),
`behaviour` (the per-sample and gradient checks at the training sizes, including the one trace
of the training program per run config that the pre-flight reuses), `compile` (the pre-flight
included), `run` (training) and `total`. Each repeat runs twice, in the same evaluator: with
the training program's call sizes `traced` by the trainer job (the cache entries deleted first:
the design before they were kept) and `cached` (read from beside the baselines).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from metarl.evaluation import baseline_cache
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.settings import CascadeSettings
from metarl.tasks import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="classic")
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    settings = CascadeSettings(
        suite=args.suite,
        seeds=2,
        seed_values=[0, 1],
        total_timesteps=args.timesteps,
        heldout=False,
        probe_seed=0,
    )
    source = get_task("drift").seed_program("ppo_clip").source
    print(f"machine: {platform.node()} ({os.cpu_count()} cores); {args.suite}, {args.timesteps}")
    columns = "call sizes | precheck s | behaviour s | compile s | run s | total s | checks %"
    print(f"| repeat | {columns} |")
    print("|---|---|---|---|---|---|---|---|")
    with Evaluator(settings, workers=1) as evaluator:
        evaluator.references("drift", [0, 1])
        for repeat in range(args.repeats):
            for sizes in ("traced", "cached"):
                if sizes == "traced":  # the previous design: every trainer job traces them
                    for entry in baseline_cache.call_sizes_dir().glob("sizes-*.json"):
                        entry.unlink()
                time.sleep(5.0)  # the spares finish preloading, as during an LLM call
                outcome = evaluator.evaluate(source, "drift")
                t = outcome.timings
                checks = t.get("precheck", 0.0) + t.get("behaviour", 0.0)
                print(
                    f"| {repeat} | {sizes} | {t.get('precheck', 0):.2f} | "
                    f"{t.get('behaviour', 0):.2f} | {t.get('compile', 0):.2f} | "
                    f"{t.get('run', 0):.2f} | {t['total']:.2f} | "
                    f"{100 * checks / t['total']:.0f} |"
                )


if __name__ == "__main__":
    main()
