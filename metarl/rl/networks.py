"""Actor-critic MLPs and the categorical policy helpers PPO needs (no distrax: it pulls a
moving tfp-nightly build, and a categorical is three lines of jax.nn)."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


def _dense(features: int, scale: float) -> nn.Dense:
    return nn.Dense(
        features,
        kernel_init=nn.initializers.orthogonal(scale),
        bias_init=nn.initializers.constant(0.0),
    )


class MLP(nn.Module):
    hidden: Sequence[int]
    out: int
    out_scale: float
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for width in self.hidden:
            x = act(_dense(width, np.sqrt(2))(x))
        return _dense(self.out, self.out_scale)(x)


class ActorCritic(nn.Module):
    """Separate policy and value MLPs, orthogonal init (policy head scaled by 0.01)."""

    num_actions: int
    hidden_size: int = 64
    num_layers: int = 2
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        hidden = [self.hidden_size] * self.num_layers
        logits = MLP(hidden, self.num_actions, 0.01, self.activation, name="actor")(obs)
        value = MLP(hidden, 1, 1.0, self.activation, name="critic")(obs)
        return logits, jnp.squeeze(value, axis=-1)


def sample_action(key: jax.Array, logits: jax.Array) -> jax.Array:
    return jax.random.categorical(key, logits)


def log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def entropy(logits: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
