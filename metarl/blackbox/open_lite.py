"""OPEN-lite: a learned optimizer for the `optimizer` task, searched by the same ES machinery.

OPEN (Goldie et al., 2024) meta-learns an update rule from per-parameter features. This smaller
variant uses only what the optimizer contract offers each parameter element, made scale-free by
Adam's denominator `d = sqrt(v_hat) + eps`:

    features = [g/d, m_0.1/d, m_0.5/d, m_0.9/d, m_0.99/d, m_0.999/d, param, progress]
    update   = (m_hat/d + net(features)) * -lr          net: bias-free Dense(H) -> tanh -> Dense(1)

so all-zero weights are Adam bit for bit (written in the Adam seed program's operation order,
which reproduces optax.adam), and the network learns a correction in units of Adam's step. The
rule is elementwise (the network acts on each element's own features), so it is an ordinary
`optimizer` candidate once exported, and the cascade scores it like any other.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from metarl.blackbox.export import float_literal, network_source
from metarl.rl.components import Components
from metarl.rl.configs import PPOConfig
from metarl.rl.lpo import LPONetwork, MetaParams
from metarl.rl.trainer import TrainResult
from metarl.rl.trainers import make_train
from metarl.tasks.optimizer.plug import rule_optimizer

OPEN_LITE_HIDDEN = 16  # the rule runs on every parameter element at every step: keep it small
NUM_FEATURES = 8
B1, B2, EPS = 0.9, 0.999, 1e-5  # Adam's, as in the `adam` seed program


def init_params(rng: jax.Array, hidden_size: int = OPEN_LITE_HIDDEN) -> MetaParams:
    """Random OPEN-lite network parameters (the LPO network's architecture, 8 inputs)."""
    return LPONetwork(hidden_size).init(rng, jnp.zeros((NUM_FEATURES,), jnp.float32))


def zero_params(hidden_size: int = OPEN_LITE_HIDDEN) -> MetaParams:
    """All-zero parameters: the rule is then Adam exactly."""
    return jax.tree.map(jnp.zeros_like, init_params(jax.random.PRNGKey(0), hidden_size))


def open_lite_rule(params: MetaParams) -> Callable:
    """The update rule `optimizer(grad, param, momentum, state, step, progress, lr)` of the
    network `params` (contract of the optimizer task; state[0], state[1] are Adam's moments)."""
    inner = params["params"]  # traced under jit: no numpy conversion
    hidden, out = inner["hidden"]["kernel"], inner["out"]["kernel"][:, 0]

    def optimizer(grad, param, momentum, state, step, progress, lr):
        first = (1 - B1) * grad + B1 * state[0]
        second = (1 - B2) * (grad**2) + B2 * state[1]
        first_hat = first / (1 - B1**step)
        second_hat = second / (1 - B2**step)
        denom = jnp.sqrt(second_hat + 0.0) + EPS
        features = jnp.stack(
            [grad / denom]
            + [momentum[i] / denom for i in range(5)]
            + [param, jnp.broadcast_to(progress, jnp.shape(grad))],
            axis=-1,
        )
        net = jnp.tanh(features @ hidden) @ out
        update = (first_hat / denom + net) * -lr
        return update, state.at[0].set(first).at[1].set(second)

    return optimizer


def make_open_lite_train(config: PPOConfig) -> Callable[[jax.Array, MetaParams], TrainResult]:
    """`train(rng, meta_params)`: PPO whose optimizer is the OPEN-lite rule of `meta_params`."""

    def train(rng: jax.Array, meta_params: MetaParams) -> TrainResult:
        rule = open_lite_rule(meta_params)
        components = Components(make_optimizer=lambda schedule, cfg: rule_optimizer(rule, schedule))
        return make_train(config, components)(rng)

    return train


TEMPLATE = """\
# {title}
# OPEN-lite: Adam plus a learned correction, net = Dense({width}) -> tanh -> Dense(1) (no
# biases) over Adam-normalised gradient and momenta, the parameter and progress; exported by
# metarl. All-zero weights are Adam.
def optimizer(grad, param, momentum, state, step, progress, lr):
    hidden = jnp.array({hidden}, dtype=jnp.float32)
    out = jnp.array({out}, dtype=jnp.float32)
    first = (1 - 0.9) * grad + 0.9 * state[0]
    second = (1 - 0.999) * (grad ** 2) + 0.999 * state[1]
    first_hat = first / (1 - 0.9 ** step)
    second_hat = second / (1 - 0.999 ** step)
    denom = jnp.sqrt(second_hat + 0.0) + {eps}
    features = jnp.stack(
        [grad / denom]
        + [momentum[i] / denom for i in range(5)]
        + [param, jnp.broadcast_to(progress, jnp.shape(grad))],
        axis=-1,
    )
    net = jnp.tanh(features @ hidden) @ out
    update = (first_hat / denom + net) * -lr
    return update, state.at[0].set(first).at[1].set(second)
"""


def open_lite_source(params: MetaParams, title: str = "OPEN-lite network") -> str:
    """Candidate source (the optimizer contract) of the OPEN-lite rule with `params`.

    Raises:
        ExportError: non-finite weights, or source beyond the static check's limits.
    """
    return network_source(TEMPLATE, params, title, eps=float_literal(np.float32(EPS)))
