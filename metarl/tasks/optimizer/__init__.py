"""The `optimizer` task: an elementwise update rule in the style of OPEN, replacing Adam."""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp

from metarl.rl.components import Components
from metarl.rl.verifier.artifact import ElementSignature
from metarl.tasks.base import Task
from metarl.tasks.optimizer.families import FAMILIES
from metarl.tasks.optimizer.plug import MOMENTUM_DECAYS, NUM_STATE_SLOTS, rule_optimizer
from metarl.tasks.optimizer.probes import fingerprint_inputs, probes
from metarl.tasks.optimizer.terms import BLOCKS
from metarl.tasks.vocabulary import AVAILABLE

CONTRACT = f"""\
Write a Python function
    optimizer(grad, param, momentum, state, step, progress, lr) -> (update, new_state)
that is the update rule of the optimizer training a PPO agent's neural networks (it replaces
Adam). It is applied elementwise, separately to every parameter tensor: every input below has
the parameter tensor's shape P, with the stated leading axis for momentum and state.

Inputs:
- grad: float32 [P], the gradient of the PPO loss (already clipped to global norm 0.5).
- param: float32 [P], the current parameter values.
- momentum: float32 [{len(MOMENTUM_DECAYS)}, *P], exponential moving averages of grad
  maintained for you at decays {MOMENTUM_DECAYS} (row i uses decay i; not bias-corrected;
  they already include this step's grad).
- state: float32 [{NUM_STATE_SLOTS}, *P], your own per-parameter memory; zeros at the first
  step; whatever you return as new_state comes back as state on the next step.
- step: int32 scalar, the number of optimizer steps including this one (1, 2, 3, ...).
- progress: float32 scalar in [0, 1], the fraction of training completed.
- lr: float32 scalar, the linearly annealed learning rate tuned for Adam on this environment.

Output: a tuple (update, new_state): update is float32 [P] and is *added* to param (so a
descent step is negative: e.g. -lr * grad); new_state is float32 [{NUM_STATE_SLOTS}, *P].

Constraints: elementwise (an element of update may only depend on the same element of the
inputs: no sums, means or norms over the parameter axes); finite values; shapes exactly as
stated.
{AVAILABLE} Write pure, jit-compatible code: no Python `if` on array values (use
jnp.where), no numpy, no I/O.

Example (Adam with eps 1e-5):
    def optimizer(grad, param, momentum, state, step, progress, lr):
        first = 0.1 * grad + 0.9 * state[0]
        second = 0.001 * grad ** 2 + 0.999 * state[1]
        first_hat = first / (1 - 0.9 ** step)
        second_hat = second / (1 - 0.999 ** step)
        update = -lr * first_hat / (jnp.sqrt(second_hat) + 1e-5)
        return update, state.at[0].set(first).at[1].set(second)

Before any training the rule is checked on random inputs: it must compile under jax.jit (step,
progress and lr are traced values, as in training) and jax.vmap, return exactly the shapes and
dtypes above, stay finite over a dozen steps with its state fed back (state starts at zeros),
and be elementwise: changing or permuting elements of the inputs may only change or permute the
same elements of the outputs.
"""


SIGNATURE = ElementSignature(
    inputs=(
        ((), "float32"),  # grad
        ((), "float32"),  # param
        ((len(MOMENTUM_DECAYS),), "float32"),  # momentum
        ((NUM_STATE_SLOTS,), "float32"),  # state
        ((), "int32"),  # step
        ((), "float32"),  # progress
        ((), "float32"),  # lr
    ),
    outputs=(((), "float32"), ((NUM_STATE_SLOTS,), "float32")),
    differentiable=False,
)


def per_element(rule: Callable) -> dict[str, Callable]:
    """The rule on one parameter element (scalars, momentum [5], state [4]): what is exported."""
    return {"rule": rule}


def assemble(calls: dict[str, Callable]) -> Callable:
    """optimizer(grad, param, momentum, state, step, progress, lr) from the verified artifact."""
    call = calls["rule"]

    def optimizer(grad, param, momentum, state, step, progress, lr):
        shape = jnp.shape(grad)

        def spread(value, dtype):
            return jnp.broadcast_to(jnp.asarray(value, dtype), shape)

        update, new_state = call(
            spread(grad, jnp.float32),
            spread(param, jnp.float32),
            jnp.asarray(momentum, jnp.float32),
            jnp.asarray(state, jnp.float32),
            spread(step, jnp.int32),
            spread(progress, jnp.float32),
            spread(lr, jnp.float32),
        )
        return update, new_state

    return optimizer


def plug(rule):

    return Components(make_optimizer=lambda schedule, config: rule_optimizer(rule, schedule))


TASK = Task(
    name="optimizer",
    function_name="optimizer",
    signature="optimizer(grad, param, momentum, state, step, progress, lr) -> (update, new_state)",
    contract=CONTRACT,
    baseline_name="adam",
    slot="make_optimizer",
    plug=plug,
    probes=probes,
    fingerprint_inputs=fingerprint_inputs,
    element_signature=SIGNATURE,
    per_element=per_element,
    assemble=assemble,
    families=FAMILIES,
    building_blocks=BLOCKS,
)
