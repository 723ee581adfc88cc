"""The `value_loss` task: the critic's per-sample loss inside PPO's loss (rl/loss.py).

Its candidate fills the trainer's `value_loss` slot, which PPO and RL²'s outer loop read (MAML
has no critic in its inner step, so `--meta maml` refuses the task). The baseline is PPO's
clipped value loss: with it the trainer is exactly PPO.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp

from metarl.rl.artifact import ElementSignature
from metarl.tasks.base import Task
from metarl.tasks.value_loss.probes import EPSILON, fingerprint_inputs, probes
from metarl.tasks.vocabulary import AVAILABLE

CONTRACT = f"""\
Write a Python function `value_loss(value, old_value, target, epsilon)` that defines the
critic's loss of PPO, per sample.

PPO's loss on a minibatch is
    actor_loss + vf_coef * mean(value_loss(value, old_value, target, epsilon)) - ent_coef * entropy
and training follows its gradient with respect to the critic's `value`.

Inputs (all float32 JAX arrays of the same shape, one element per sample in a minibatch):
- value: the critic's current prediction V(s) (being trained);
- old_value: the prediction V_old(s) recorded when the rollout was collected;
- target: the regression target, GAE's advantage + V_old(s) (a return estimate);
- epsilon: a Python float, PPO's clip range ({EPSILON} by default); use it or ignore it.

Output: a float32 array with exactly the shape of `value` (elementwise; no reductions).

Constraints (a value loss trains the critic toward its targets):
- value_loss >= 0 everywhere;
- it pulls toward the target: d value_loss / d value has the sign of (value - target) or is
  0, and is not 0 where value == old_value and value is at least 0.1 away from the target;
- finite values and finite gradients for any finite inputs (|values| up to 1e3).

{AVAILABLE} Write pure, jit-compatible code: no Python `if` on
array values (use jnp.where), no numpy, no I/O, no global state.

Example (PPO's clipped value loss):
    def value_loss(value, old_value, target, epsilon):
        clipped = old_value + jnp.clip(value - old_value, -epsilon, epsilon)
        return 0.5 * jnp.maximum(jnp.square(value - target), jnp.square(clipped - target))

Before any training the function is checked on random inputs: it must compile under jax.jit
and jax.vmap, return float32 with exactly value's shape, give finite values and gradients, be
elementwise, have as gradient the slope of its own values (no jax.lax.stop_gradient or custom
gradients), be >= 0 and pull toward the target as above. A program that breaks any of these is
rejected.
"""

# epsilon is a Python float in the contract, so it is baked into the exported program: one
# variant per clip range the trainer's configs use (PPOConfig.clip_eps)
EPSILONS = (EPSILON,)
SIGNATURE = ElementSignature(
    inputs=(((), "float32"), ((), "float32"), ((), "float32")),
    outputs=(((), "float32"),),
    differentiable=True,
)


def _variant(epsilon: float) -> str:
    return f"epsilon={float(epsilon)!r}"


def per_element(function: Callable) -> dict[str, Callable]:
    """The loss of one (value, old_value, target) sample, per clip range: what is exported."""
    return {
        _variant(e): (lambda value, old, target, e=e: function(value, old, target, e))
        for e in EPSILONS
    }


def assemble(calls: dict[str, Callable]) -> Callable:
    """value_loss(value, old_value, target, epsilon) from the verified artifact's variants."""

    def value_loss(value, old_value, target, epsilon):
        name = _variant(epsilon)
        if name not in calls:
            raise ValueError(f"the value loss was exported for {sorted(calls)}, not {name}")
        value = jnp.asarray(value, jnp.float32)
        old_value = jnp.broadcast_to(jnp.asarray(old_value, jnp.float32), value.shape)
        target = jnp.broadcast_to(jnp.asarray(target, jnp.float32), value.shape)
        return calls[name](value, old_value, target)[0]

    return value_loss


TASK = Task(
    name="value_loss",
    function_name="value_loss",
    signature="value_loss(value, old_value, target, epsilon) -> array",
    contract=CONTRACT,
    baseline_name="ppo_clip",
    slot="value_loss",
    probes=probes,
    fingerprint_inputs=fingerprint_inputs,
    element_signature=SIGNATURE,
    per_element=per_element,
    assemble=assemble,
)
