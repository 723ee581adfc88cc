"""What a candidate can replace in the trainer: one slot per component.

The slots are the fields of `Components`; each trainer says which of them it uses
(`ppo.SLOTS`, `rl2.SLOTS`, `maml.SLOTS`), and a task names the one slot its candidate fills
(`metarl.tasks.base.Task.slot`). PPO's per-sample loss (loss.py) reads `drift` and
`value_loss`; every trainer builds its optimizer with `make_optimizer`.

Kept apart from ppo.py so that tasks can build `Components` without importing the training
stack (gymnax and its plotting dependencies): the tracer and the CLI import tasks, not PPO.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from metarl.rl.configs import PPOConfig

DriftFn = Callable[[jax.Array, jax.Array, float], jax.Array]
# value_loss(value, old_value, target, epsilon) -> the critic's loss per sample
ValueLossFn = Callable[[jax.Array, jax.Array, jax.Array, float], jax.Array]
Schedule = Callable[[jax.Array], jax.Array]
OptimizerFactory = Callable[[Schedule, PPOConfig], optax.GradientTransformation]


def ppo_clip_drift(ratio: jax.Array, advantage: jax.Array, epsilon: float) -> jax.Array:
    """PPO's clipped objective written as a drift: ratio*A - drift = min(ratio*A, clip(ratio)*A)."""
    return jax.nn.relu((ratio - jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)) * advantage)


def ppo_clip_value_loss(
    value: jax.Array, old_value: jax.Array, target: jax.Array, epsilon: float
) -> jax.Array:
    """PPO's clipped value loss per sample: the worse of the new value's and of the value
    moved at most `epsilon` from the one the rollout recorded (as purejaxrl and CleanRL)."""
    clipped = old_value + jnp.clip(value - old_value, -epsilon, epsilon)
    return 0.5 * jnp.maximum(jnp.square(value - target), jnp.square(clipped - target))


def squared_value_loss(
    value: jax.Array, old_value: jax.Array, target: jax.Array, epsilon: float
) -> jax.Array:
    """Half the squared error, ignoring the old value and epsilon."""
    return 0.5 * jnp.square(value - target)


def adam_optimizer(learning_rate: Schedule, config: PPOConfig) -> optax.GradientTransformation:
    return optax.adam(learning_rate, eps=config.adam_eps)


@dataclass(frozen=True)
class Components:
    """The algorithm components a candidate may replace. The defaults are PPO with Adam."""

    drift: DriftFn = ppo_clip_drift
    value_loss: ValueLossFn = ppo_clip_value_loss
    make_optimizer: OptimizerFactory = adam_optimizer


SLOT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Components))
