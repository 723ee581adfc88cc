"""PPO in the purejaxrl style, with the two components metarl discovers plugged in.

`make_train(config, components)` returns `train(rng) -> TrainResult`, a pure function that is
jitted end to end and vmapped over seeds by the caller; `make_trainer` gives the same run as
`init` and `segment(runner, stop)`, so a run can stop after its first segment (the cascade's
short run) and go on later with the same compiled program. The structure mirrors the algorithm:

    for each update (lax.while_loop up to the segment's traced stop):
        collect num_steps x num_envs transitions          (lax.scan over env steps)
        compute GAE advantages, bootstrapping time-limit truncations from V(final_obs)
        for each epoch, for each minibatch                 (lax.scan, lax.scan)
            loss = ppo_loss(...)  (loss.py: the drift and value-loss slots)
            params <- optimizer(clip_by_global_norm(grad))    (the optimizer slot)

With the PPO-clip drift and Adam this *is* PPO. The learning curve is downsampled to
`config.num_log_points` points (an outer scan over chunks of updates), so memory does not grow
with the run length. Non-finite losses or parameters are tracked per update: silent NaN inside
jit would otherwise train on and report a plausible return.

Besides the return, the run reports how much the agent still had to learn at its end: the
*positive value loss* of Prioritized Level Replay (Jiang et al. 2021), the mean of max(A, 0)
over the GAE advantages of the same tail window as the final return. A curriculum ranks levels
by it. It is computed here, from the raw advantages (before the loss normalises them), so a
candidate moves it only through how it trains, never by reporting it.

With `config.eval_episodes > 0` the run is scored as DiscoGen scores it (rl/discobench.py): at
a segment's end the final policy plays `eval_episodes` greedy episodes from fresh resets
(`greedy_returns`), and their mean is the run's `final_return` (also `greedy_return`), the one
number every layer above scores. The learning curve stays the training curve.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from metarl.rl.components import Components
from metarl.rl.configs import PPOConfig
from metarl.rl.environments.registry import FlatDiscreteEnv, make_env
from metarl.rl.loss import LOSS_SLOTS, ppo_loss
from metarl.rl.meta.names import META_PREFIX
from metarl.rl.networks import ActorCritic, log_prob, sample_action
from metarl.rl.trainer import (  # noqa: F401 (the contract PPO implements, re-exported)
    NEGATIVE_DRIFT_TOLERANCE,
    Trainer,
    TrainResult,
    learning_rate_schedule,
    whole_run,
)


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array  # terminated or truncated: the trajectory is cut here either way
    truncated: jax.Array  # cut by the time limit: bootstrap from V(final_obs)
    final_obs: jax.Array


class Batch(NamedTuple):
    """What the loss needs from a transition (the rest stays out of the minibatch shuffles)."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array


class Runner(NamedTuple):
    """Everything one seed's training carries from update to update (and across segments)."""

    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array
    episodes: tuple[jax.Array, jax.Array]  # per env: running return, last finished return
    key: jax.Array
    update: jax.Array  # int32: updates done so far
    first_nonfinite: jax.Array  # int32, -1 while every update stayed finite
    first_negative_drift: jax.Array  # int32, -1 while the drift stayed >= -tolerance
    min_drift: jax.Array  # the smallest drift value of any minibatch so far
    log: jax.Array  # [num_log_points, 5] sums: return, episodes, actor, value, entropy
    tail_start: jax.Array  # int32: episodes ending from this update on count in `tail`
    tail: jax.Array  # [2]: return sum and episode count of the current segment's tail
    tail_advantage: jax.Array  # [2]: positive value loss sum and update count of the same tail
    # the env's params when it is one member of a family (`FlatDiscreteEnv.family`: a grid
    # level, a gymnax variant), an input of the program; None: the env's own, constants
    level: Any = None


def compute_gae(
    traj: Transition, final_value: jax.Array, last_value: jax.Array, gamma: float, lam: float
):
    """Generalised advantage estimation, scanning backwards over the rollout.

    A step cut by the time limit is not terminal: its return continues past the cut, so it is
    bootstrapped with gamma * V(final_obs) before the trajectory boundary zeroes the future.
    """

    def backward(carry, inputs):
        t, final_v = inputs
        next_advantage, next_value = carry
        bootstrap = gamma * final_v * t.truncated
        not_done = 1.0 - t.done
        delta = t.reward + bootstrap + gamma * next_value * not_done - t.value
        advantage = delta + gamma * lam * not_done * next_advantage
        return (advantage, t.value), advantage

    _, advantages = jax.lax.scan(
        backward, (jnp.zeros_like(last_value), last_value), (traj, final_value), reverse=True
    )
    return advantages, advantages + traj.value


def positive_value_loss(advantages: jax.Array) -> jax.Array:
    """PLR's positive value loss of one rollout: the mean over its steps of max(advantage, 0).

    Args:
        advantages: the rollout's GAE advantages, any shape ([num_steps, num_envs] in the
            trainer), as GAE computes them: not normalised.

    Returns:
        A float32 scalar >= 0 (NaN when an advantage is NaN).
    """
    return jnp.mean(jnp.maximum(advantages, 0.0)).astype(jnp.float32)


def greedy_returns(
    network: ActorCritic,
    params: Any,
    env: FlatDiscreteEnv,
    key: jax.Array,
    episodes: int,
    max_steps: int,
    level: Any = None,
) -> jax.Array:
    """The returns of the greedy policy (the argmax of its logits), as DiscoGen evaluates a
    trained agent: the score is what the policy does, not what it did while exploring.

    Args:
        network: the actor-critic `params` belong to.
        params: its parameters.
        env: the environment (`make_env`); it resets itself after a done, which is why each
            episode counts only up to its first done.
        key: the evaluation's PRNG key. With `key_reset, key_steps = split(key)`, episode i
            starts from `env.reset(split(key_reset, episodes)[i])` and step t's env keys are
            `split(split(key_steps, max_steps)[t], episodes)`.
        episodes: how many episodes run, in parallel (a static int).
        max_steps: how many steps each runs (a static int): the env's `max_steps`, so every
            episode ends by its time limit at the latest.
        level: the env's params when they are a program input (`FlatDiscreteEnv.level`);
            None: its own.

    Returns:
        float32 [episodes]: each episode's return summed up to and including its first done
        (one still running after `max_steps` steps: its return so far).
    """
    key_reset, key_steps = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(key_reset, episodes), level
    )

    def step(carry, step_key):
        state, obs, ended, total = carry
        logits, _ = network.apply(params, obs)
        action = jnp.argmax(logits, axis=-1)
        out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(step_key, episodes), state, action, level
        )
        total = total + jnp.where(ended, 0.0, out.reward)
        ended = ended | out.terminated | out.truncated
        return (out.state, out.obs, ended, total), None

    start = (state, obs, jnp.zeros((episodes,), bool), jnp.zeros((episodes,), jnp.float32))
    (_, _, _, total), _ = jax.lax.scan(step, start, jax.random.split(key_steps, max_steps))
    return total


# The greedy evaluation's key is fold_in(runner key, this): with JAX's partitionable threefry,
# fold_in(k, i) equals split(k, n)[i], so a small constant would reuse a key the next update
# draws (it splits the runner's key in 3); no split is this large.
GREEDY_EVAL_STREAM = 0x7E5A11D0


def _tree_all_finite(tree: Any) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


# the Components slots this trainer uses: the loss's and the optimizer
SLOTS = LOSS_SLOTS + ("make_optimizer",)


def make_trainer(
    config: PPOConfig, components: Components = Components(), lr: jax.Array | float | None = None
) -> Trainer:
    """Build the `Trainer` (init, segment) of one seed; vmap it over seeds and jit.

    `lr`, when given (a traced scalar inside a vmapped learning-rate sweep), replaces
    `config.lr` as the peak of the annealed learning rate (see `learning_rate_schedule`);
    None trains exactly as before the argument existed.

    A run is one or more segments of the same program: the update count to stop at is a traced
    value, so the cascade's short run is the first segment of the full run (learning rate
    annealed over the whole run) and continuing it costs no second compile.

    Besides the returns, the run records the invariants of the plugged-in components as it
    trains: the first update whose loss, parameters or optimizer state stop being finite, and
    the first update in which the drift goes below -NEGATIVE_DRIFT_TOLERANCE.
    """
    if config.env_name.startswith(META_PREFIX):
        raise ValueError(f"{config.env_name} is a meta-RL run: rl/trainers.py dispatches it")
    env = make_env(config.env_name)
    if config.eval_episodes > 0 and env.max_steps < 1:
        raise ValueError(
            f"{config.env_name} has no max_steps_in_episode for a greedy evaluation to run to"
        )
    network = ActorCritic(
        num_actions=env.num_actions,
        hidden_size=config.hidden_size,
        num_layers=config.num_layers,
        activation=config.activation,
    )
    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        components.make_optimizer(learning_rate_schedule(config, lr), config),
    )
    num_updates = config.num_updates
    num_points = min(config.num_log_points, num_updates)
    # Update u is logged into bucket u * num_points // num_updates: near-equal buckets that
    # cover every update, accumulated in the scan carry so memory stays flat.
    buckets = np.arange(num_updates) * num_points // num_updates
    updates_per_bucket = np.bincount(buckets, minlength=num_points)
    bucket_end_steps = (np.cumsum(updates_per_bucket) * config.batch_size).astype(np.int32)
    # The final return is the mean return of episodes that ended in the last 10% of a
    # segment's updates; when none did (episodes longer than that window), each env's last
    # finished episode. The positive value loss is the mean, over the same updates, of each
    # rollout's `positive_value_loss`: every epoch's minibatches are a permutation of the whole
    # rollout (batch_size = num_minibatches * minibatch_size), so this is also its mean over
    # the minibatch data the updates trained on.

    def loss_fn(params, batch: Batch, advantage, target):
        logits, value = network.apply(params, batch.obs)
        return ppo_loss(
            components,
            config,
            logits,
            value,
            batch.action,
            batch.log_prob,
            batch.value,
            advantage,
            target,
        )

    def env_step(level, carry, key):
        params, env_state, obs, episode_return, last_return = carry
        key_action, key_step = jax.random.split(key)
        logits, value = network.apply(params, obs)
        action = sample_action(key_action, logits)
        step_keys = jax.random.split(key_step, config.num_envs)
        step = jax.vmap(env.step, in_axes=(0, 0, 0, None))(step_keys, env_state, action, level)
        done = jnp.logical_or(step.terminated, step.truncated)
        transition = Transition(
            obs=obs,
            action=action,
            log_prob=log_prob(logits, action),
            value=value,
            reward=step.reward,
            done=done.astype(jnp.float32),
            truncated=step.truncated.astype(jnp.float32),
            final_obs=step.final_obs,
        )
        episode_return = episode_return + step.reward
        finished_return = jnp.sum(jnp.where(done, episode_return, 0.0))
        last_return = jnp.where(done, episode_return, last_return)
        episode_return = jnp.where(done, 0.0, episode_return)
        stats = (finished_return, jnp.sum(done))
        carry = (params, step.state, step.obs, episode_return, last_return)
        return carry, (transition, stats)

    def update_minibatch(carry, minibatch):
        params, opt_state = carry
        batch, advantage, target = minibatch
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        (total, aux), grads = grad_fn(params, batch, advantage, target)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state), (total, aux)

    def update_epoch(carry, key, traj, advantages, targets):
        params, opt_state = carry
        permutation = jax.random.permutation(key, config.batch_size)

        def to_minibatches(x):
            x = x.reshape((config.batch_size,) + x.shape[2:])[permutation]
            return x.reshape((config.num_minibatches, config.minibatch_size) + x.shape[1:])

        batch = Batch(traj.obs, traj.action, traj.log_prob, traj.value)
        minibatches = jax.tree.map(to_minibatches, (batch, advantages, targets))
        return jax.lax.scan(update_minibatch, (params, opt_state), minibatches)

    def update(runner: Runner) -> Runner:
        key, key_rollout, key_epochs = jax.random.split(runner.key, 3)
        (params, env_state, obs, episode_return, last_return), (traj, (ret_sum, ret_count)) = (
            jax.lax.scan(
                functools.partial(env_step, runner.level),
                (runner.params, runner.env_state, runner.obs, *runner.episodes),
                jax.random.split(key_rollout, config.num_steps),
            )
        )
        _, last_value = network.apply(params, obs)
        # One batched forward pass over the whole rollout, cheaper than one per env step.
        _, final_value = network.apply(params, traj.final_obs)
        advantages, targets = compute_gae(
            traj, final_value, last_value, config.gamma, config.gae_lambda
        )

        (params, opt_state), (total, (actor, value, ent, min_drift)) = jax.lax.scan(
            lambda c, k: update_epoch(c, k, traj, advantages, targets),
            (params, runner.opt_state),
            jax.random.split(key_epochs, config.update_epochs),
        )
        index = runner.update
        finite = jnp.all(jnp.isfinite(total)) & _tree_all_finite((params, opt_state))
        min_drift = jnp.min(min_drift)
        negative = min_drift < -NEGATIVE_DRIFT_TOLERANCE
        bucket = index * num_points // num_updates
        metrics = jnp.stack(
            [ret_sum.sum(), ret_count.sum(), actor.mean(), value.mean(), ent.mean()]
        )
        in_tail = index >= runner.tail_start
        tail_advantage = jnp.stack([positive_value_loss(advantages), jnp.float32(1.0)])
        return Runner(
            params=params,
            opt_state=opt_state,
            env_state=env_state,
            obs=obs,
            episodes=(episode_return, last_return),
            key=key,
            update=index + 1,
            first_nonfinite=jnp.where(
                (runner.first_nonfinite < 0) & ~finite, index, runner.first_nonfinite
            ),
            first_negative_drift=jnp.where(
                (runner.first_negative_drift < 0) & negative, index, runner.first_negative_drift
            ),
            min_drift=jnp.minimum(runner.min_drift, min_drift),
            log=runner.log.at[bucket].add(metrics),
            tail_start=runner.tail_start,
            tail=runner.tail + in_tail * jnp.stack([ret_sum.sum(), ret_count.sum()]),
            # where, not a product: a NaN rollout before the tail must not reach it (0 * NaN)
            tail_advantage=runner.tail_advantage + jnp.where(in_tail, tail_advantage, 0.0),
            level=runner.level,
        )

    def init(rng: jax.Array, level: Any = None) -> Runner:
        """A seed's runner before its first update; `level`: the params of the family member
        it trains on (`FlatDiscreteEnv.level`), default the config's env's."""
        level = env.level if level is None else level
        rng, key_init, key_reset = jax.random.split(rng, 3)
        params = network.init(key_init, jnp.zeros((env.obs_size,), jnp.float32))
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(key_reset, config.num_envs), level
        )
        return Runner(
            params=params,
            opt_state=optimizer.init(params),
            env_state=env_state,
            obs=obs,
            episodes=(  # running return of the current episode, and of the last finished one
                jnp.zeros((config.num_envs,), jnp.float32),
                jnp.full((config.num_envs,), jnp.nan, jnp.float32),
            ),
            key=rng,
            update=jnp.asarray(0, jnp.int32),
            first_nonfinite=jnp.asarray(-1, jnp.int32),
            first_negative_drift=jnp.asarray(-1, jnp.int32),
            min_drift=jnp.asarray(jnp.inf, jnp.float32),
            log=jnp.zeros((num_points, 5), jnp.float32),
            tail_start=jnp.asarray(0, jnp.int32),
            tail=jnp.zeros((2,), jnp.float32),
            tail_advantage=jnp.zeros((2,), jnp.float32),
            level=level,
        )

    def segment(runner: Runner, stop: jax.Array) -> tuple[Runner, TrainResult]:
        """Run updates runner.update .. stop-1 and summarise the run so far.

        The final return is that of the episodes ended in the last 10% of the run's updates
        so far (updates max(1, stop // 10) before `stop`), or with `config.eval_episodes` the
        greedy evaluation's mean return at the segment's end; the positive value loss is the
        mean over the same updates. The window is the run's, not the segment's, so where the
        evaluator cuts a run into segments (a short run, the rungs of evaluation/fidelity.py)
        never changes a score, as long as the last segment is at least the window long (a
        shorter one is scored over its own updates).
        """
        stop = jnp.asarray(stop, jnp.int32)
        runner = runner._replace(
            tail_start=jnp.maximum(runner.update, stop - jnp.maximum(1, stop // 10)),
            tail=jnp.zeros((2,), jnp.float32),
            tail_advantage=jnp.zeros((2,), jnp.float32),
        )
        runner = jax.lax.while_loop(lambda r: r.update < stop, update, runner)
        return runner, summarise(runner)

    def summarise(runner: Runner) -> TrainResult:
        ret_sum, episodes, actor, value, ent = runner.log.T
        tail_sum, tail_count = runner.tail
        final_return = jnp.where(
            tail_count > 0,
            tail_sum / jnp.maximum(tail_count, 1),
            jnp.nanmean(runner.episodes[1]),
        )
        advantage_sum, tail_updates = runner.tail_advantage
        # NaN when the segment ran no update (stop at or before where the runner was)
        value_loss_tail = jnp.where(
            tail_updates > 0, advantage_sum / jnp.maximum(tail_updates, 1), jnp.nan
        )
        per_update = jnp.asarray(np.maximum(updates_per_bucket, 1), jnp.float32)
        greedy = None
        if config.eval_episodes > 0:
            key = jax.random.fold_in(runner.key, GREEDY_EVAL_STREAM)
            returns = greedy_returns(
                network,
                runner.params,
                env,
                key,
                config.eval_episodes,
                env.max_steps,
                runner.level,
            )
            # non-finite parameters still pick an argmax: score NaN, never a number
            greedy = jnp.where(_tree_all_finite(runner.params), jnp.mean(returns), jnp.nan)
            final_return = greedy  # the one place the greedy return becomes the run's score
        return TrainResult(
            steps=jnp.asarray(bucket_end_steps),
            episode_return=jnp.where(episodes > 0, ret_sum / jnp.maximum(episodes, 1), jnp.nan),
            episodes=episodes,
            actor_loss=actor / per_update,
            value_loss=value / per_update,
            entropy=ent / per_update,
            first_nonfinite_update=runner.first_nonfinite,
            first_negative_drift_update=runner.first_negative_drift,
            min_drift=runner.min_drift,
            final_return=final_return,
            positive_value_loss=value_loss_tail,
            greedy_return=greedy,
        )

    return Trainer(init=init, segment=segment)


def make_train(config: PPOConfig, components: Components = Components()):
    """Build `train(rng) -> TrainResult` for one seed (the whole run as one segment); vmap it
    over seeds and jit."""
    return whole_run(make_trainer(config, components), config.num_updates)
