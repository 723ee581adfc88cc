"""An elementwise update rule as an optax GradientTransformation."""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

MOMENTUM_DECAYS = (0.1, 0.5, 0.9, 0.99, 0.999)
NUM_STATE_SLOTS = 4

UpdateRule = Callable[..., tuple[jax.Array, jax.Array]]


class RuleState(NamedTuple):
    count: jax.Array  # int32 scalar: optimizer steps taken so far
    momentum: optax.Params  # per leaf [len(MOMENTUM_DECAYS), *shape]
    slots: optax.Params  # per leaf [NUM_STATE_SLOTS, *shape], owned by the rule


def rule_optimizer(
    rule: UpdateRule,
    learning_rate: Callable[[jax.Array], jax.Array],
    total_steps: int | None = None,
) -> optax.GradientTransformation:
    """Wrap `rule(grad, param, momentum, state, step, progress, lr)` as an optax transform.

    `learning_rate` is evaluated at the 0-based step count, as optax.adam does, and `step`
    passed to the rule is 1-based, as Adam's bias correction expects; so a rule written in
    optax's operation order reproduces optax.adam. `total_steps`, when given, defines progress;
    otherwise progress is read off the annealing schedule (1 - lr/lr0).
    """
    decays = jnp.asarray(MOMENTUM_DECAYS, jnp.float32)

    def init(params):
        return RuleState(
            count=jnp.zeros([], jnp.int32),
            momentum=jax.tree.map(
                lambda p: jnp.zeros((len(MOMENTUM_DECAYS),) + p.shape, p.dtype), params
            ),
            slots=jax.tree.map(lambda p: jnp.zeros((NUM_STATE_SLOTS,) + p.shape, p.dtype), params),
        )

    def update(grads, state: RuleState, params=None):
        if params is None:
            raise ValueError("the update rule needs params: call update(grads, state, params)")
        lr = jnp.asarray(learning_rate(state.count), jnp.float32)
        step = optax.safe_increment(state.count)
        if total_steps is not None:
            progress = jnp.minimum(step / total_steps, 1.0).astype(jnp.float32)
        else:
            lr0 = jnp.asarray(learning_rate(jnp.zeros([], jnp.int32)), jnp.float32)
            progress = jnp.clip(1.0 - lr / jnp.where(lr0 == 0, 1.0, lr0), 0.0, 1.0)

        def leaf(g, p, m, s):
            shape = (-1,) + (1,) * g.ndim
            m = decays.reshape(shape) * m + (1 - decays.reshape(shape)) * g[None]
            u, s = rule(g, p, m, s, step, progress, lr)
            return u, m, s

        out = jax.tree.map(leaf, grads, params, state.momentum, state.slots)
        treedef = jax.tree.structure(grads)
        leaves = treedef.flatten_up_to(out)
        updates = treedef.unflatten([u for u, _, _ in leaves])
        momentum = treedef.unflatten([m for _, m, _ in leaves])
        slots = treedef.unflatten([s for _, _, s in leaves])
        return updates, RuleState(count=step, momentum=momentum, slots=slots)

    return optax.GradientTransformation(init, update)
