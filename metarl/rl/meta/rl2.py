"""RL² (Duan et al. 2016; Wang et al. 2016): a recurrent policy trained by PPO across trials.

The slow loop is PPO over many tasks; the fast loop is the GRU's hidden state, which reads the
previous action, reward and episode-end flag and carries what it learned about the task across
the episodes of one trial. The structure:

    for each update (lax.while_loop, see loop.py):
        draw num_envs tasks; run one whole trial on each     (lax.scan over trial steps)
            hidden state h = 0 at the trial's start, carried across its episodes
            input_t = (obs_t, one_hot(a_{t-1}), r_{t-1}, episode_ended_{t-1})
        GAE over the trial: episode ends inside it are not cut (the objective is the trial's
            return, which is what makes exploring early pay), the trial's end is terminal
        for each epoch, for each minibatch of whole trials   (re-run the GRU from h = 0)
            loss = ppo_loss(...)  (loss.py: the drift and value-loss slots)
            params <- optimizer(clip_by_global_norm(grad))    (the optimizer slot)

The candidate's components are the outer loop's (components.py), exactly where PPO uses them:
the loss is PPO's own (loss.py), so every slot PPO reads, RL² reads (`SLOTS`).
With `memory=False` the same trainer trains a feedforward policy on the observation
alone: the memoryless baseline RL² must beat on later episodes.

What the seed notebook got wrong, and the tests check here: it trained one policy per
environment and reset the memory every episode, so nothing could be meta-learned.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from metarl.rl.components import Components
from metarl.rl.configs import PPOConfig
from metarl.rl.loss import ppo_loss
from metarl.rl.meta.loop import MetaLearner, MetaStats
from metarl.rl.meta.names import METHOD_SLOTS
from metarl.rl.meta.tasks import TaskFamily, sample_tasks
from metarl.rl.networks import log_prob, sample_action
from metarl.rl.scratch import ScratchSettings, scratch_adaptation_curve


class RL2Network(nn.Module):
    """A GRU actor-critic: `(h, x) -> (h', logits, value)` for one step.

    With `memory=False` it is an MLP on the observation alone (the hidden state passes through
    untouched and the previous action/reward are not read).
    """

    num_actions: int
    obs_size: int
    hidden_size: int = 64
    memory: bool = True

    @nn.compact
    def __call__(self, h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        dense = lambda n, s: nn.Dense(  # noqa: E731
            n, kernel_init=nn.initializers.orthogonal(s), bias_init=nn.initializers.zeros
        )
        if self.memory:
            z = nn.tanh(dense(self.hidden_size, np.sqrt(2))(x))
            h, z = nn.GRUCell(self.hidden_size)(h, z)
        else:
            z = nn.tanh(dense(self.hidden_size, np.sqrt(2))(x[..., : self.obs_size]))
            z = nn.tanh(dense(self.hidden_size, np.sqrt(2))(z))
        logits = dense(self.num_actions, 0.01)(z)
        value = dense(1, 1.0)(nn.tanh(dense(self.hidden_size, np.sqrt(2))(z)))
        return h, logits, value[..., 0]


def input_size(family: TaskFamily) -> int:
    """obs + one-hot previous action + previous reward + previous episode end."""
    return family.obs_size + family.num_actions + 2


class Trial(NamedTuple):
    """One trial on one task, step by step (leading axis: trial steps)."""

    inputs: jax.Array  # the network's input at each step
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    episode_end: jax.Array  # float: this step ends an episode (the last one ends the trial)
    hidden: jax.Array  # the hidden state the step started from


def run_trial(
    network: RL2Network, params: Any, family: TaskFamily, key: jax.Array, task: Any
) -> Trial:
    """One trial of `family.episodes` episodes on `task`, the hidden state carried across them.

    Args:
        network: the RL² network.
        params: its parameters.
        family: the task family (horizon, episodes).
        key: PRNG key for resets, actions and the environment.
        task: the task (the env's params), fixed for the whole trial.

    Returns:
        The trial's `Trial` record ([family.trial_length, ...] leaves).
    """
    env, horizon = family.env, family.horizon
    key_reset, key_steps = jax.random.split(key)
    obs, state = env.reset_env(key_reset, task)
    carry = (
        jnp.zeros((network.hidden_size,), jnp.float32),
        obs.astype(jnp.float32),
        state,
        jnp.zeros((family.num_actions,), jnp.float32),
        jnp.float32(0.0),
        jnp.float32(0.0),
    )

    def step(carry, inputs):
        t, key = inputs
        h, obs, state, prev_action, prev_reward, prev_end = carry
        key_action, key_step, key_reset = jax.random.split(key, 3)
        x = jnp.concatenate([obs, prev_action, prev_reward[None], prev_end[None]])
        h_next, logits, value = network.apply(params, h, x)
        action = sample_action(key_action, logits)
        obs_next, state_next, reward, _, _ = env.step_env(key_step, state, action, task)
        end = (t + 1) % horizon == 0
        obs_reset, state_reset = env.reset_env(key_reset, task)
        state_next = jax.tree.map(lambda a, b: jnp.where(end, a, b), state_reset, state_next)
        obs_next = jnp.where(end, obs_reset, obs_next).astype(jnp.float32)
        reward = reward.astype(jnp.float32)
        record = Trial(x, action, log_prob(logits, action), value, reward, end, h)
        one_hot = jax.nn.one_hot(action, family.num_actions, dtype=jnp.float32)
        return (h_next, obs_next, state_next, one_hot, reward, end.astype(jnp.float32)), record

    steps = jnp.arange(family.trial_length)
    _, trial = jax.lax.scan(step, carry, (steps, jax.random.split(key_steps, family.trial_length)))
    return trial._replace(episode_end=trial.episode_end.astype(jnp.float32))


def replay(network: RL2Network, params: Any, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Re-run the network over one trial's recorded inputs from h = 0.

    Returns:
        (logits [T, A], values [T]).
    """

    def step(h, x):
        h, logits, value = network.apply(params, h, x)
        return h, (logits, value)

    _, (logits, values) = jax.lax.scan(step, jnp.zeros((network.hidden_size,)), inputs)
    return logits, values


def trial_gae(trial: Trial, gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
    """GAE over one trial: no cut at episode ends inside it, zero value after its last step.

    Returns:
        (advantages [T], value targets [T]).
    """

    def backward(carry, t):
        next_advantage, next_value = carry
        delta = t.reward + gamma * next_value - t.value
        advantage = delta + gamma * lam * next_advantage
        return (advantage, t.value), advantage

    _, advantages = jax.lax.scan(
        backward, (jnp.float32(0.0), jnp.float32(0.0)), trial, reverse=True
    )
    return advantages, advantages + trial.value


def episode_returns(trial: Trial, family: TaskFamily) -> jax.Array:
    """The return of each episode of a trial ([episodes]); works on batched leading axes."""
    rewards = trial.reward.reshape(trial.reward.shape[:-1] + (family.episodes, family.horizon))
    return rewards.sum(axis=-1)


def adaptation_curve(
    network: RL2Network, params: Any, family: TaskFamily, key: jax.Array, count: int
) -> jax.Array:
    """Mean return at each episode index of a trial, over `count` tasks drawn with `key`.

    Returns:
        float32[family.episodes].
    """
    key_tasks, key_trials = jax.random.split(key)
    tasks = sample_tasks(family, key_tasks, count)
    trials = jax.vmap(lambda k, task: run_trial(network, params, family, k, task))(
        jax.random.split(key_trials, count), tasks
    )
    return episode_returns(trials, family).mean(axis=0)


# the Components slots RL² uses: PPO's loss and optimizer (the outer loop)
SLOTS = METHOD_SLOTS["rl2"]


def rl2_loss(network, params, trials: Trial, advantages, targets, components, config):
    """PPO's loss (loss.py) on a minibatch of whole trials ([B, T] leaves), re-running the GRU.

    Returns:
        (total loss, LossTerms).
    """
    logits, values = jax.vmap(lambda x: replay(network, params, x))(trials.inputs)
    return ppo_loss(
        components,
        config,
        logits,
        values,
        trials.action,
        trials.log_prob,
        trials.value,
        advantages,
        targets,
    )


def make_rl2_learner(
    config: PPOConfig,
    components: Components,
    family: TaskFamily,
    learning_rate: Any,
    eval_tasks: int = 64,
    memory: bool = True,
) -> MetaLearner:
    """RL² as a `MetaLearner` (loop.py): one PPO update on `config.num_envs` fresh trials.

    Args:
        config: PPO's settings; `num_steps` must be the family's trial length (one trial per
            env per update), `num_envs` must divide into `num_minibatches`.
        components: the candidate's components (`SLOTS`): PPO's outer loop.
        family: the task family.
        learning_rate: the optimizer's schedule (ppo.learning_rate_schedule).
        eval_tasks: held-out tasks the adaptation curve is averaged over.
        memory: False trains the memoryless baseline (no GRU, no previous action/reward).

    Returns:
        The learner; its adaptation curve has `family.episodes` points.
    """
    if config.num_steps != family.trial_length:
        raise ValueError(
            f"RL² on {family.name} needs num_steps = {family.trial_length} (one trial), "
            f"not {config.num_steps}"
        )
    if config.num_envs % config.num_minibatches:
        raise ValueError("RL² needs num_envs divisible by num_minibatches (whole trials)")
    network = RL2Network(family.num_actions, family.obs_size, config.hidden_size, memory)
    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        components.make_optimizer(learning_rate, config),
    )
    minibatch = config.num_envs // config.num_minibatches

    def init(key):
        params = network.init(
            key, jnp.zeros((config.hidden_size,), jnp.float32), jnp.zeros((input_size(family),))
        )
        return params, optimizer.init(params)

    def update_minibatch(carry, batch):
        params, opt_state = carry
        trials, advantages, targets = batch
        loss = lambda p: rl2_loss(  # noqa: E731
            network, p, trials, advantages, targets, components, config
        )
        (total, parts), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state), (total, parts)

    def update_epoch(carry, key, data):
        permutation = jax.random.permutation(key, config.num_envs)
        shuffled = jax.tree.map(
            lambda x: x[permutation].reshape((config.num_minibatches, minibatch) + x.shape[1:]),
            data,
        )
        return jax.lax.scan(update_minibatch, carry, shuffled)

    def update(params, opt_state, key):
        key_tasks, key_trials, key_epochs = jax.random.split(key, 3)
        tasks = sample_tasks(family, key_tasks, config.num_envs)
        trials = jax.vmap(lambda k, t: run_trial(network, params, family, k, t))(
            jax.random.split(key_trials, config.num_envs), tasks
        )
        advantages, targets = jax.vmap(lambda t: trial_gae(t, config.gamma, config.gae_lambda))(
            trials
        )
        (params, opt_state), (total, parts) = jax.lax.scan(
            lambda c, k: update_epoch(c, k, (trials, advantages, targets)),
            (params, opt_state),
            jax.random.split(key_epochs, config.update_epochs),
        )
        stats = MetaStats(
            episode_return=episode_returns(trials, family).mean(),
            episodes=jnp.float32(config.num_envs * family.episodes),
            actor_loss=parts.actor.mean(),
            value_loss=parts.value.mean(),
            entropy=parts.entropy.mean(),
            loss=jnp.where(jnp.all(jnp.isfinite(total)), total.mean(), jnp.nan),
            min_drift=jnp.min(parts.min_drift),
        )
        return params, opt_state, stats

    def curve(params, key):
        return adaptation_curve(network, params, family, key, eval_tasks)

    def reference(key):
        # one episode per round: the from-scratch learner sees what RL² sees, episode by episode
        settings = ScratchSettings(rounds=family.episodes, episodes=1)
        return scratch_adaptation_curve(config, family, settings, key, eval_tasks)

    return MetaLearner(init=init, update=update, curve=curve, reference=reference)
