"""PPO's loss, written once, with a slot for each component a candidate can replace.

Every trainer that takes PPO steps calls `ppo_loss` (ppo.py on single environments, rl2.py on
whole trials, scratch.py's from-scratch reference): a new slot is read here, so no trainer can
ignore it while claiming to use it (tests/test_slots.py poisons each slot of each trainer).

    ratio  = pi(a|s) / pi_old(a|s)
    A      = (A - mean A) / (std A + 1e-8)                    over the minibatch
    actor  = -mean(ratio * A - drift(ratio, A, eps))          slot `drift`
    value  = mean(value_loss(V, V_old, target, eps))          slot `value_loss`
    loss   = actor + vf_coef * value - ent_coef * mean(entropy)

With the default components (PPO-clip drift, PPO's clipped value loss) this is PPO's loss
bit for bit: the half in the value loss moved inside the mean, which is exact in float32.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from metarl.rl.components import Components
from metarl.rl.configs import PPOConfig
from metarl.rl.networks import entropy, log_prob

# the slots the loss reads; a trainer that calls it and builds its optimizer with
# `components.make_optimizer` uses LOSS_SLOTS + ("make_optimizer",)
LOSS_SLOTS = ("drift", "value_loss")


class LossTerms(NamedTuple):
    """The loss's parts, for the learning curves and the drift invariant."""

    actor: jax.Array
    value: jax.Array
    entropy: jax.Array
    min_drift: jax.Array  # the smallest drift value of the minibatch


def ppo_loss(
    components: Components,
    config: PPOConfig,
    logits: jax.Array,
    value: jax.Array,
    action: jax.Array,
    old_log_prob: jax.Array,
    old_value: jax.Array,
    advantage: jax.Array,
    target: jax.Array,
) -> tuple[jax.Array, LossTerms]:
    """PPO's loss on a minibatch, any leading shape ([B] samples or [B, T] trials).

    Args:
        components: the drift and value loss (the optimizer is the trainer's).
        config: clip_eps (the drift's and value loss's epsilon), vf_coef, ent_coef.
        logits: the current policy's logits, [..., num_actions].
        value: the current critic's values.
        action, old_log_prob, old_value: what the rollout recorded.
        advantage: raw GAE advantages (normalised here, per minibatch).
        target: the critic's regression targets.

    Returns:
        (total loss, LossTerms).
    """
    ratio = jnp.exp(log_prob(logits, action) - old_log_prob)
    advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    drift_values = components.drift(ratio, advantage, config.clip_eps)
    actor = -jnp.mean(ratio * advantage - drift_values)
    critic = jnp.mean(components.value_loss(value, old_value, target, config.clip_eps))
    ent = jnp.mean(entropy(logits))
    total = actor + config.vf_coef * critic - config.ent_coef * ent
    return total, LossTerms(actor, critic, ent, jnp.min(drift_values))
