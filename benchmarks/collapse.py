"""The drift that wins early and collapses later (issue 39): PPO-clip, LPO and
`relu((ratio - clip(ratio, 0 - eps, 1 + eps)) * A)` (no lower trust region) trained on one env
at several budgets, on the same seeds.

This is why a race at the demo's budget needs a stability check (discovery/races.py): at 1e5
steps on Breakout-MinAtar the collapsing drift is the best of the three; at 5e5 it is the
worst by far.

    python benchmarks/collapse.py                                   # Breakout-MinAtar, 1e5 and 5e5
    python benchmarks/collapse.py --env SpaceInvaders-MinAtar --budgets 1e5,5e5 --seeds 8

Trusted programs only: they run in-process, without the sandbox. Prints one table per budget.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np

from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.training import run_training
from metarl.tasks import get_task
from metarl.tasks.candidate import load_function

COLLAPSING = """def drift(ratio, advantage, epsilon):
    return jax.nn.relu((ratio - jnp.clip(ratio, 0 - epsilon, 1 + epsilon)) * advantage)
"""


def programs() -> dict[str, str]:
    task = get_task("drift")
    return {
        "ppo_clip": task.seed_program("ppo_clip").source,
        "lpo": task.seed_program("lpo").source,
        "no lower trust region": COLLAPSING,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--budgets", default="1e5,5e5")
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    seeds = list(range(args.seeds))
    print(f"{args.env}, seeds {seeds}, this trainer's config ({platform.node()})\n")
    print("| budget | drift | final return per seed | mean | run s |")
    print("|---:|---|---|---:|---:|")
    for budget in (int(float(b)) for b in args.budgets.split(",")):
        config = default_config(args.env, total_timesteps=budget)
        for name, source in programs().items():
            components = Components(drift=load_function(source, "drift"))
            run = run_training(config, components, seeds)
            returns = ", ".join(f"{r:.2f}" for r in run.final_returns)
            mean = float(np.mean(run.final_returns))
            print(f"| {budget:.0e} | {name} | {returns} | {mean:.2f} | {run.run_s:.0f} |")


if __name__ == "__main__":
    main()
