"""Trainer throughput: compile time, run time and env-steps/s per environment and seed count.

    python benchmarks/evaluator.py                 # CartPole 1/8/64 seeds, Breakout 1/8 seeds
    python benchmarks/evaluator.py --minatar-full  # + the minatar suite at 1e7 steps (GPU)

Prints a table (and --json for the raw rows). Steps/s counts env steps over all seeds.
"""

from __future__ import annotations

import argparse
import json
import platform

import jax
from rich.console import Console
from rich.table import Table

import metarl  # noqa: F401  (sets XLA flags before jax starts)
from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.suites import get_suite
from metarl.rl.training import run_training


def device_name() -> str:
    device = jax.devices()[0]
    if device.platform == "cpu":
        return (
            f"CPU ({platform.processor() or platform.machine()}, {jax.local_device_count()} device)"
        )
    return getattr(device, "device_kind", device.platform)


def cases(minatar_full: bool, breakout_steps: int):
    yield default_config("CartPole-v1"), 1
    yield default_config("CartPole-v1"), 8
    yield default_config("CartPole-v1"), 64
    yield default_config("Breakout-MinAtar", total_timesteps=breakout_steps), 1
    yield default_config("Breakout-MinAtar", total_timesteps=breakout_steps), 8
    if minatar_full:
        suite = get_suite("minatar")
        for env in (*suite.envs, *suite.heldout):
            yield suite.config(env), 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minatar-full", action="store_true", help="add the minatar suite at 1e7")
    parser.add_argument("--breakout-steps", type=int, default=100_000)
    parser.add_argument("--only", default=None, help="run only cases whose env contains this")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    rows = []
    for config, num_seeds in cases(args.minatar_full, args.breakout_steps):
        if args.only and args.only not in config.env_name:
            continue
        run = run_training(config, Components(), seeds=list(range(num_seeds)))
        rows.append(
            dict(
                env=config.env_name,
                seeds=num_seeds,
                steps=run.total_timesteps,
                compile_s=round(run.compile_s, 2),
                run_s=round(run.run_s, 2),
                total_s=round(run.compile_s + run.run_s, 2),
                steps_per_s=round(run.steps_per_s),
                final_return=round(run.mean, 2),
            )
        )

    if args.json:
        print(json.dumps({"device": device_name(), "rows": rows}, indent=2))
        return
    table = Table(title=f"metarl PPO trainer on {device_name()} (jax {jax.__version__})")
    for column in (
        "env",
        "seeds",
        "steps",
        "compile s",
        "run s",
        "total s",
        "env-steps/s",
        "final return",
    ):
        table.add_column(column, justify="left" if column == "env" else "right")
    for r in rows:
        table.add_row(
            r["env"],
            str(r["seeds"]),
            f"{r['steps']:.2g}",
            f"{r['compile_s']:.1f}",
            f"{r['run_s']:.1f}",
            f"{r['total_s']:.1f}",
            f"{r['steps_per_s']:,}",
            f"{r['final_return']:.1f}",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
