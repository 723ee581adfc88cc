"""Optimizer families (tasks/families.py): update rules from the optimisation literature,
written with OPEN's inputs (Goldie et al. 2024: the training progress, the given momenta).

Each keeps its memory in the task's four state slots and its update finite for any gradient
(every division has a positive floor). tests/test_families.py draws members and runs the task's
own probes on them.
"""

from __future__ import annotations

from metarl.tasks.families import Param, ProgramFamily

ADAM = ProgramFamily(
    "adam",
    """def optimizer(grad, param, momentum, state, step, progress, lr):
    first = (1 - $b1) * grad + $b1 * state[0]
    second = (1 - $b2) * grad ** 2 + $b2 * state[1]
    first_hat = first / (1 - $b1 ** step)
    second_hat = second / (1 - $b2 ** step)
    update = -lr * $scale * first_hat / (jnp.sqrt(second_hat) + $eps)
    return update, state.at[0].set(first).at[1].set(second)
""",
    (
        Param("b1", 0.5, 0.95, log=False),
        Param("b2", 0.9, 0.9999, log=False),
        Param("eps", 1e-8, 1e-3),
        Param("scale", 0.3, 3.0),
    ),
    "Adam (Kingma & Ba 2015) with its betas, epsilon and step size drawn",
)

LION = ProgramFamily(
    "lion",
    """def optimizer(grad, param, momentum, state, step, progress, lr):
    direction = jnp.sign($b1 * state[0] + (1 - $b1) * grad)
    update = -lr * $scale * direction
    return update, state.at[0].set($b2 * state[0] + (1 - $b2) * grad)
""",
    (
        Param("b1", 0.8, 0.95, log=False),
        Param("b2", 0.9, 0.999, log=False),
        Param("scale", 0.03, 1.0),
    ),
    "Lion (Chen et al. 2023): the sign of an interpolated momentum",
)

ADAM_DECAYED = ProgramFamily(
    "adam_progress_decay",
    """def optimizer(grad, param, momentum, state, step, progress, lr):
    second = 0.001 * grad ** 2 + 0.999 * state[1]
    second_hat = second / (1 - 0.999 ** step)
    first_hat = momentum[2] / (1 - 0.9 ** step)
    shrink = (1.0 - $decay * progress) ** $power
    update = -lr * shrink * first_hat / (jnp.sqrt(second_hat) + 1e-5)
    return update, state.at[1].set(second)
""",
    (Param("decay", 0.1, 0.99, log=False), Param("power", 0.5, 3.0)),
    "Adam with a step size shrinking with OPEN's training progress",
)

MOMENTUM_MIX = ProgramFamily(
    "momentum_mix",
    """def optimizer(grad, param, momentum, state, step, progress, lr):
    second = 0.001 * grad ** 2 + 0.999 * state[1]
    second_hat = second / (1 - 0.999 ** step)
    fast = momentum[1] / (1 - 0.5 ** step)
    slow = momentum[3] / (1 - 0.99 ** step)
    mixed = (1 - $mix) * fast + $mix * slow
    update = -lr * mixed / (jnp.sqrt(second_hat) + 1e-5)
    return update, state.at[1].set(second)
""",
    (Param("mix", 0.05, 0.95, log=False),),
    "Adam on a mixture of a fast and a slow momentum (OPEN's several timescales)",
)

CLIPPED_ADAM = ProgramFamily(
    "clipped_adam",
    """def optimizer(grad, param, momentum, state, step, progress, lr):
    second = 0.001 * grad ** 2 + 0.999 * state[1]
    second_hat = second / (1 - 0.999 ** step)
    first_hat = momentum[2] / (1 - 0.9 ** step)
    raw = first_hat / (jnp.sqrt(second_hat) + 1e-5)
    update = -lr * jnp.clip(raw, -$limit, $limit)
    return update, state.at[1].set(second)
""",
    (Param("limit", 0.1, 3.0),),
    "Adam with each element's normalised step clipped (update clipping, as in Adafactor)",
)

FAMILIES = (ADAM, LION, ADAM_DECAYED, MOMENTUM_MIX, CLIPPED_ADAM)
