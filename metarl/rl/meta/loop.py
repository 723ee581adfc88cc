"""The outer loop every meta-RL learner shares, as a `Trainer` with PPO's contract.

A meta-learner (rl2.py, maml.py) is three pure functions (`MetaLearner`): `init(key) ->
(params, opt_state)`, `update(params, opt_state, key) -> (params, opt_state, MetaStats)` (one
meta-update on freshly drawn tasks) and `curve(params, key) -> float32[P]` (its adaptation
curve on tasks drawn with `key`). This module turns them into `Trainer(init, segment)` and
`TrainResult` exactly like ppo.py's, so everything above the trainer — seeds vmapped in one
program, the cascade's short run continued, the learning-rate sweep, NaN and negative-drift
tracking, the baseline cache, normalisation, the archive — runs a meta-learner unchanged:

- the learning curve is the meta-training curve (mean episode return per logged chunk);
- `final_return` is the *adaptation score*: the mean of the adaptation curve on held-out tasks
  (the area under it: a learner that adapts sooner scores higher);
- `adaptation` is the curve itself (RL²: return per episode of a trial; MAML: return after
  0..K inner steps), and `scratch` PPO's from scratch with the same experience on the same
  tasks (scratch.py): a paired reference, independent of the candidate.

The held-out tasks come from `fold_in(seed key, role salt)`: unpredictable before the
training seeds are drawn (they are drawn per batch), the same again from the recorded seed,
and different for the train, validation and test roles.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from metarl.rl.configs import PPOConfig
from metarl.rl.trainer import NEGATIVE_DRIFT_TOLERANCE, Trainer, TrainResult

# which held-out tasks each role's adaptation is measured on (folded into the seed's key)
ROLE_SALTS = {"train": 1, "validation": 2, "test": 3}


class MetaStats(NamedTuple):
    """What one meta-update reports (scalars)."""

    episode_return: jax.Array  # mean episode return of the update's (adapted) rollouts
    episodes: jax.Array  # how many episodes that mean is over
    actor_loss: jax.Array
    value_loss: jax.Array
    entropy: jax.Array
    loss: jax.Array  # the total loss (its finiteness is tracked)
    min_drift: jax.Array  # +inf where the learner has no drift


class MetaLearner(NamedTuple):
    """A meta-learner as pure functions.

    Attributes:
        init: `init(key) -> (params, opt_state)`.
        update: `update(params, opt_state, key) -> (params, opt_state, MetaStats)`.
        curve: `curve(params, key) -> float32[P]`, the adaptation curve on tasks drawn with key.
        reference: `reference(key) -> float32[P]`, PPO from scratch with the same experience on
            the same tasks (scratch.py), the curve's paired reference.
    """

    init: Callable[[jax.Array], tuple[Any, Any]]
    update: Callable[[Any, Any, jax.Array], tuple[Any, Any, MetaStats]]
    curve: Callable[[Any, jax.Array], jax.Array]
    reference: Callable[[jax.Array], jax.Array]


class MetaRunner(NamedTuple):
    params: Any
    opt_state: Any
    key: jax.Array
    eval_key: jax.Array
    update: jax.Array
    first_nonfinite: jax.Array
    first_negative_drift: jax.Array
    min_drift: jax.Array
    log: jax.Array  # [num_points, 5] sums: return, episodes, actor, value, entropy


def _all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def make_meta_trainer(
    config: PPOConfig, learner: MetaLearner, role: str, scratch: bool = True
) -> Trainer:
    """A `Trainer` over `learner`'s meta-updates; vmap it over seeds and jit.

    Args:
        config: num_updates, batch_size (env steps per meta-update) and num_log_points are
            read from it.
        learner: the meta-learner.
        role: "train", "validation" or "test": which held-out tasks score adaptation.
        scratch: also train the from-scratch reference at each segment's end (`scratch` of
            the result; None without). It does not depend on the candidate, so the cascade
            computes it once, in the baseline's program, and its candidates' programs leave
            it out (measured: bandit-tasks@rl2's compile 19-20 s with it, 11-12 s without).

    Returns:
        `Trainer(init, segment)`; `segment(runner, stop)` returns a `TrainResult` whose
        `final_return` is the mean adaptation curve and `adaptation` the curve.
    """
    num_updates = config.num_updates
    num_points = min(config.num_log_points, num_updates)
    buckets = np.arange(num_updates) * num_points // num_updates
    updates_per_bucket = np.bincount(buckets, minlength=num_points)
    bucket_end_steps = (np.cumsum(updates_per_bucket) * config.batch_size).astype(np.int32)
    salt = ROLE_SALTS[role]

    def init(rng: jax.Array) -> MetaRunner:
        # the held-out key is split off before training starts, so no meta-update ever draws
        # from it (fold_in(k, i) is split(k)[i] under partitionable threefry: folding the
        # salt into the training key would hand role 1's tasks to the first update)
        rng, key_init, key_eval = jax.random.split(rng, 3)
        params, opt_state = learner.init(key_init)
        return MetaRunner(
            params=params,
            opt_state=opt_state,
            key=rng,
            eval_key=jax.random.fold_in(key_eval, salt),
            update=jnp.asarray(0, jnp.int32),
            first_nonfinite=jnp.asarray(-1, jnp.int32),
            first_negative_drift=jnp.asarray(-1, jnp.int32),
            min_drift=jnp.asarray(jnp.inf, jnp.float32),
            log=jnp.zeros((num_points, 5), jnp.float32),
        )

    def update(runner: MetaRunner) -> MetaRunner:
        key, key_update = jax.random.split(runner.key)
        params, opt_state, stats = learner.update(runner.params, runner.opt_state, key_update)
        index = runner.update
        finite = jnp.isfinite(stats.loss) & _all_finite((params, opt_state))
        negative = stats.min_drift < -NEGATIVE_DRIFT_TOLERANCE
        metrics = jnp.stack(
            [
                stats.episode_return * stats.episodes,
                stats.episodes,
                stats.actor_loss,
                stats.value_loss,
                stats.entropy,
            ]
        ).astype(jnp.float32)
        return MetaRunner(
            params=params,
            opt_state=opt_state,
            key=key,
            eval_key=runner.eval_key,
            update=index + 1,
            first_nonfinite=jnp.where(
                (runner.first_nonfinite < 0) & ~finite, index, runner.first_nonfinite
            ),
            first_negative_drift=jnp.where(
                (runner.first_negative_drift < 0) & negative, index, runner.first_negative_drift
            ),
            min_drift=jnp.minimum(runner.min_drift, stats.min_drift),
            log=runner.log.at[index * num_points // num_updates].add(metrics),
        )

    def segment(runner: MetaRunner, stop: jax.Array) -> tuple[MetaRunner, TrainResult]:
        stop = jnp.asarray(stop, jnp.int32)
        runner = jax.lax.while_loop(lambda r: r.update < stop, update, runner)
        curve = learner.curve(runner.params, runner.eval_key).astype(jnp.float32)
        # a policy with non-finite parameters still acts (NaN logits sample something): its
        # curve is NaN, never a number, besides the recorded first non-finite update
        curve = jnp.where(_all_finite(runner.params), curve, jnp.nan)
        ret_sum, episodes, actor, value, ent = runner.log.T
        per_update = jnp.asarray(np.maximum(updates_per_bucket, 1), jnp.float32)
        return runner, TrainResult(
            steps=jnp.asarray(bucket_end_steps),
            episode_return=jnp.where(episodes > 0, ret_sum / jnp.maximum(episodes, 1), jnp.nan),
            episodes=episodes,
            actor_loss=actor / per_update,
            value_loss=value / per_update,
            entropy=ent / per_update,
            first_nonfinite_update=runner.first_nonfinite,
            first_negative_drift_update=runner.first_negative_drift,
            min_drift=runner.min_drift,
            final_return=jnp.mean(curve),
            positive_value_loss=jnp.float32(jnp.nan),
            adaptation=curve,
            scratch=learner.reference(runner.eval_key).astype(jnp.float32) if scratch else None,
        )

    return Trainer(init=init, segment=segment)
