"""Which environments separate good RL algorithms from worse ones? (issue 23)

A validation or test environment is only worth its compute if it *discriminates*: programs
known to differ in quality must score differently there, by more than seed noise. This
benchmark trains a fixed panel of drift programs — the task's seed programs (PPO-clip, LPO's
discovered drift) and known-worse variants (no trust region, a trust region too tight to learn
in time, a drift that punishes improvement) — on candidate environments, normalises each
against PPO-clip on the same seeds, and prints, per environment:

- the spread: max minus min of the programs' mean normalised scores;
- the discrimination ratio: the standard deviation between the programs' means divided by
  the mean standard error within a program (seed noise). Above ~3, a 4-seed evaluation can
  tell the panel apart; near 1, the environment is noise.

Usage:
    python benchmarks/discrimination.py --envs CartPole-v1,Catch-bsuite --seeds 4
    python benchmarks/discrimination.py --timesteps 500000   # the classic suite's budget

Trusted programs only: they run in-process, without the sandbox.
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from metarl.rl.components import Components, ppo_clip_drift
from metarl.rl.configs import default_config
from metarl.rl.training import random_policy_return, run_training


def lpo_discovered(ratio, advantage, epsilon):
    """DPO, the closed form of LPO's discovered drift (the task's `lpo` seed program)."""
    alpha, beta = 2.0, 0.6
    log_ratio = jnp.log(ratio)
    positive = jax.nn.relu(
        (ratio - 1.0) * advantage - alpha * jnp.tanh((ratio - 1.0) * advantage / alpha)
    )
    negative = jax.nn.relu(log_ratio * advantage - beta * jnp.tanh(log_ratio * advantage / beta))
    return jnp.where(advantage >= 0.0, positive, negative)


def no_trust_region(ratio, advantage, epsilon):
    """Drift 0: the plain importance-weighted policy gradient for every epoch (known worse)."""
    return jnp.zeros_like(ratio)


def tight_clip(ratio, advantage, epsilon):
    """PPO-clip at epsilon 0.02: learns, but too slowly for the budget (known worse)."""
    return ppo_clip_drift(ratio, advantage, 0.02)


def loose_clip(ratio, advantage, epsilon):
    """PPO-clip at epsilon 0.8: a trust region too wide (known worse on most tasks)."""
    return ppo_clip_drift(ratio, advantage, 0.8)


PANEL = {
    "ppo_clip": ppo_clip_drift,
    "lpo": lpo_discovered,
    "no_trust_region": no_trust_region,
    "tight_clip": tight_clip,
    "loose_clip": loose_clip,
}

CANDIDATE_ENVS = (
    "CartPole-v1",
    "Acrobot-v1",
    "Catch-bsuite",
    "CartPole-v1:gravity=15.0+force_mag=7.0",
    "Acrobot-v1:link_mass_2=1.5+torque_noise_max=0.1",
    "MountainCar-v0",
    "FourRooms-misc",
    "SpaceInvaders-MinAtar",
    "Breakout-MinAtar",
)


def measure(env: str, timesteps: int, seeds: list[int]) -> dict[str, np.ndarray]:
    """Per program: the final return on each seed."""
    config = default_config(env, total_timesteps=timesteps)
    return {
        name: np.asarray(run_training(config, Components(drift=drift), seeds).final_returns)
        for name, drift in PANEL.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default=",".join(CANDIDATE_ENVS))
    parser.add_argument("--timesteps", type=int, default=500_000)
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    seeds = list(range(1000, 1000 + args.seeds))
    print(f"# discrimination: {args.timesteps} steps, seeds {seeds}, {platform.node()}")
    header = "| env | " + " | ".join(PANEL) + " | spread | ratio | s |"
    print(header)
    print("|" + "---|" * (len(PANEL) + 4))
    for env in args.envs.split(","):
        start = time.perf_counter()
        returns = measure(env, args.timesteps, seeds)
        random = random_policy_return(env)
        baseline = float(np.mean(returns["ppo_clip"]))
        denominator = baseline - random if abs(baseline - random) > 1e-8 else np.nan
        scores = {k: (v - random) / denominator for k, v in returns.items()}
        means = np.array([np.mean(s) for s in scores.values()])
        noise = np.mean([np.std(s, ddof=1) / np.sqrt(len(s)) for s in scores.values()])
        ratio = float(np.std(means, ddof=1) / noise) if noise > 0 else float("inf")
        cells = " | ".join(f"{m:.2f}" for m in means)
        spread = float(np.max(means) - np.min(means))
        seconds = time.perf_counter() - start
        print(f"| {env} | {cells} | {spread:.2f} | {ratio:.1f} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
