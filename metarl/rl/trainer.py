"""The trainer contract: what every trainer (PPO, the meta-learners) gives the layers above.

A run is `Trainer.init(rng) -> runner` and `Trainer.segment(runner, stop) -> (runner,
TrainResult)`; the result's fields are the same for PPO on one environment and for a
meta-learner (whose `final_return` is its mean adaptation curve). Kept apart from ppo.py so the
meta-learners implement it without importing PPO, and the dispatch between them
(trainers.py) sits above both.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from metarl.rl.components import Schedule
from metarl.rl.configs import PPOConfig

# A drift below this is a violation of the drift contract, recorded as training runs (the probes
# check the same program on random inputs; this checks it on the trainer's own minibatches).
NEGATIVE_DRIFT_TOLERANCE = 1e-5


class Trainer(NamedTuple):
    """One seed's training as pure functions: `init(rng) -> Runner` and
    `segment(runner, stop) -> (Runner, TrainResult)`, which runs updates up to `stop`."""

    init: Callable
    segment: Callable


class TrainResult(NamedTuple):
    steps: jax.Array  # [num_log_points] env steps at the end of each logged chunk
    episode_return: jax.Array  # [num_log_points] mean return of episodes ended in the chunk
    episodes: jax.Array  # [num_log_points] number of episodes ended in the chunk
    actor_loss: jax.Array  # [num_log_points]
    value_loss: jax.Array  # [num_log_points]
    entropy: jax.Array  # [num_log_points]
    first_nonfinite_update: jax.Array  # scalar int32, -1 when every update stayed finite
    first_negative_drift_update: jax.Array  # scalar int32, -1 when the drift stayed >= -tol
    min_drift: jax.Array  # scalar: the smallest drift value of any minibatch of the run
    # scalar: see `final_return` in make_trainer; the greedy return with config.eval_episodes
    final_return: jax.Array
    positive_value_loss: jax.Array  # scalar: mean max(A, 0) over the tail's updates (NaN: none)
    # meta-RL only (rl/meta/loop.py): the adaptation curve on held-out tasks; None for PPO
    adaptation: Any = None
    # meta-RL only: PPO from scratch with the same experience on the same held-out tasks
    scratch: Any = None
    # scalar: the mean greedy return (`greedy_returns`) with config.eval_episodes > 0, else None
    greedy_return: Any = None


def learning_rate_schedule(config: PPOConfig, lr: jax.Array | float | None = None) -> Schedule:
    """purejaxrl's linear annealing: constant within an update, 0 after the last one.

    Args:
        config: the run's config; its `lr` is the peak (initial) rate unless `lr` is given.
        lr: the peak rate to use instead of `config.lr`, possibly a traced float32 scalar (one
            per row of a vmapped learning-rate sweep, see training.BatchProgram). None keeps
            the schedule exactly as without the argument: `config.lr` as a Python constant.

    Returns:
        `schedule(count) -> lr at optimizer step count` (float32).
    """
    steps_per_update = config.num_minibatches * config.update_epochs
    # A traced peak is cast to float32, the dtype the Python constant takes when it meets the
    # float32 fraction, so a swept row computes what the separate run at that lr computes.
    peak = config.lr if lr is None else jnp.asarray(lr, jnp.float32)

    def schedule(count: jax.Array) -> jax.Array:
        if not config.anneal_lr:
            return jnp.asarray(peak, jnp.float32)
        fraction = 1.0 - (count // steps_per_update) / config.num_updates
        return peak * fraction

    return schedule


def whole_run(trainer: Trainer, num_updates: int) -> Callable[[jax.Array], TrainResult]:
    """`train(rng) -> TrainResult`: the trainer's run as one segment of `num_updates`."""

    def train(rng: jax.Array) -> TrainResult:
        _, result = trainer.segment(trainer.init(rng), num_updates)
        return result

    return train
