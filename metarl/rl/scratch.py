"""PPO from scratch with the same experience: the reference every adaptation curve is read
against.

A meta-learner's adaptation curve (rl/meta/loop.py) says how well it does on a new task after
seeing some of it: RL² after each episode of a trial, MAML after each inner step's rollouts.
What a learner *without* meta-training does with exactly that experience is the comparison:
a freshly initialised feedforward actor-critic on the same task, collecting the same number of
episodes per round and taking PPO updates (clip objective, Adam, several epochs on the round's
data) between rounds. Round r's point is the mean return of the episodes collected after r
updates, so both curves share one x-axis: RL²'s rounds are its trial's episodes (one each),
MAML's are its inner steps (its episodes per step each).

Its loss is PPO's (loss.py) with one slot fixed (`FIXED_SLOTS`): the value loss is plain
squared error, as the reference has always been trained (kept so that its curves stay the
ones recorded; a clipped critic here was not measured). The meta-learners call it with the
default components: the reference is PPO's, not the candidate's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metarl.rl.components import Components, squared_value_loss
from metarl.rl.configs import PPOConfig
from metarl.rl.loss import ppo_loss
from metarl.rl.meta.tasks import Episodes, TaskFamily, run_episodes, sample_tasks
from metarl.rl.networks import ActorCritic, log_prob, sample_action

# the slots the reference fixes, whatever components it is given
FIXED_SLOTS = {"value_loss": squared_value_loss}


class ScratchSettings(NamedTuple):
    """How the from-scratch learner trains between rounds.

    Attributes:
        rounds: points of the curve (RL²: episodes per trial; MAML: inner steps + 1).
        episodes: episodes collected per round.
        lr: Adam's learning rate (constant).
        epochs: full-batch PPO epochs per round.
        hidden_size: width of the two-layer tanh MLPs.
    """

    rounds: int
    episodes: int
    lr: float = 3e-3
    epochs: int = 4
    hidden_size: int = 64


def _collect(network, params, family: TaskFamily, key, task, count: int) -> Episodes:
    """Episodes of the actor-critic, recording (log-prob, value) beside each action."""

    def act(key, obs):
        logits, value = network.apply(params, obs)
        action = sample_action(key, logits)
        return action, (log_prob(logits, action), value)

    return run_episodes(family, act, key, task, count)


def _gae(data: Episodes, gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
    def one(values, rewards):
        def backward(carry, t):
            next_advantage, next_value = carry
            value, reward = t
            advantage = reward + gamma * next_value - value + gamma * lam * next_advantage
            return (advantage, value), advantage

        _, adv = jax.lax.scan(backward, (0.0, 0.0), (values, rewards), reverse=True)
        return adv

    advantages = jax.vmap(one)(data.extra[1], data.reward)
    return advantages, advantages + data.extra[1]


def scratch_curve(
    config: PPOConfig,
    family: TaskFamily,
    settings: ScratchSettings,
    key: jax.Array,
    task: Any,
    components: Components = Components(),
) -> jax.Array:
    """The from-scratch learner's curve on one task.

    Args:
        config: gamma, gae_lambda, clip_eps, vf_coef, ent_coef, max_grad_norm, adam_eps.
        family: the task family.
        settings: rounds, episodes per round, learning rate, epochs, width.
        key: PRNG key (initialisation, rollouts).
        task: the task.
        components: PPO's components (PPO-clip and Adam by default; `FIXED_SLOTS` replaced).

    Returns:
        float32[settings.rounds]: mean episode return of each round.
    """
    network = ActorCritic(family.num_actions, settings.hidden_size, 2, "tanh")
    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        components.make_optimizer(lambda count: jnp.float32(settings.lr), config),
    )
    fixed = dataclasses.replace(components, **FIXED_SLOTS)
    key_init, key_rounds = jax.random.split(key)
    params = network.init(key_init, jnp.zeros((family.obs_size,), jnp.float32))

    def loss_fn(params, data, advantages, targets):
        logits, values = network.apply(params, data.obs)
        total, _ = ppo_loss(
            fixed,
            config,
            logits,
            values,
            data.action,
            data.extra[0],
            data.extra[1],
            advantages,
            targets,
        )
        return total

    def round_(carry, key):
        params, opt_state = carry
        data = _collect(network, params, family, key, task, settings.episodes)
        advantages, targets = _gae(data, config.gamma, config.gae_lambda)

        def epoch(carry, _):
            params, opt_state = carry
            grads = jax.grad(loss_fn)(params, data, advantages, targets)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        carry, _ = jax.lax.scan(epoch, (params, opt_state), None, settings.epochs)
        return carry, data.reward.sum(axis=-1).mean()

    _, curve = jax.lax.scan(
        round_, (params, optimizer.init(params)), jax.random.split(key_rounds, settings.rounds)
    )
    return curve


def scratch_adaptation_curve(
    config: PPOConfig,
    family: TaskFamily,
    settings: ScratchSettings,
    key: jax.Array,
    count: int,
    components: Components = Components(),
) -> jax.Array:
    """`scratch_curve` averaged over `count` tasks drawn with `key` (vmapped).

    Returns:
        float32[settings.rounds].
    """
    key_tasks, key_runs = jax.random.split(key)
    tasks = sample_tasks(family, key_tasks, count)
    curves = jax.vmap(lambda k, t: scratch_curve(config, family, settings, k, t, components))(
        jax.random.split(key_runs, count), tasks
    )
    return curves.mean(axis=0)
