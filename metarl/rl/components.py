"""What a candidate can replace in the trainer: the PPO drift and the optimizer.

Kept apart from ppo.py so that tasks can build `Components` without importing the training
stack (gymnax and its plotting dependencies): the tracer and the CLI import tasks, not PPO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from metarl.rl.configs import PPOConfig

DriftFn = Callable[[jax.Array, jax.Array, float], jax.Array]
Schedule = Callable[[jax.Array], jax.Array]
OptimizerFactory = Callable[[Schedule, PPOConfig], optax.GradientTransformation]


def ppo_clip_drift(ratio: jax.Array, advantage: jax.Array, epsilon: float) -> jax.Array:
    """PPO's clipped objective written as a drift: ratio*A - drift = min(ratio*A, clip(ratio)*A)."""
    return jax.nn.relu((ratio - jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)) * advantage)


def adam_optimizer(learning_rate: Schedule, config: PPOConfig) -> optax.GradientTransformation:
    return optax.adam(learning_rate, eps=config.adam_eps)


@dataclass(frozen=True)
class Components:
    """The algorithm components a candidate may replace. The defaults are PPO with Adam."""

    drift: DriftFn = ppo_clip_drift
    make_optimizer: OptimizerFactory = adam_optimizer
