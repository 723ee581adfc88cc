"""What the from-scratch reference costs inside a meta-RL candidate's training program.

    python benchmarks/scratch_reference.py        # bandit-tasks@rl2 and point-tasks@maml
    python benchmarks/scratch_reference.py --suites pendulum-tasks@rl2 --repeats 2

The cascade trains a meta-RL candidate's program without PPO-from-scratch on the held-out
tasks (rl/meta/loop.py `scratch=False`) and records its baseline's reference instead (the same
seeds, tasks and config: evaluation/batch_training.py `verify_outcome`). This times one
candidate program's compile and run, whole run, 2 seeds, at the suite's training budget (or
`--timesteps`), with the reference (the design before) and without, alternately.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax

from metarl.rl.suites import get_suite
from metarl.rl.trainers import make_trainer
from metarl.rl.training import seed_keys


def timed(config, scratch: bool) -> tuple[float, float]:
    """(compile s, run s) of the whole run vmapped over 2 seeds."""
    trainer = make_trainer(config, scratch=scratch)

    def train(key):
        return trainer.segment(trainer.init(key), config.num_updates)[1]

    keys = seed_keys([0, 1])
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    compiled_at = time.perf_counter()
    jax.block_until_ready(compiled(keys))
    return compiled_at - start, time.perf_counter() - compiled_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", nargs="+", default=["bandit-tasks@rl2", "point-tasks@maml"])
    parser.add_argument("--timesteps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(f"machine: {platform.node()} ({os.cpu_count()} cores)")
    print("| suite | steps | repeat | reference | compile s | run s |")
    print("|---|---|---|---|---|---|")
    for name in args.suites:
        suite = get_suite(name)
        config = suite.config(suite.envs[0], args.timesteps)
        for repeat in range(args.repeats):
            for scratch in (True, False):
                compile_s, run_s = timed(config, scratch)
                print(
                    f"| {name} | {config.total_timesteps} | {repeat} | "
                    f"{'with' if scratch else 'without'} | {compile_s:.1f} | {run_s:.1f} |"
                )


if __name__ == "__main__":
    main()
