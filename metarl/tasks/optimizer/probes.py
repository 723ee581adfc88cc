"""Probes for the `optimizer` task: cheap checks of a candidate update rule before training.

On fresh random inputs (a new rng seed per evaluation):

1. compiles under jax.jit with step, progress and lr traced, as in training (Python control
   flow or numpy on traced values fails here);
2. returns a tuple (update, new_state): update float32 of the parameter's shape P, new_state
   float32 of shape [NUM_STATE_SLOTS, *P], exactly (no silent broadcasting), for a matrix and
   a vector parameter;
3. is elementwise: (a) changing some elements of the inputs changes no other element of the
   outputs (no sums, means or norms over the parameter), (b) permuting the elements of every
   input permutes the outputs (no dependence on position);
4. vmaps (the trainer vmaps over seeds), with the same values as the unbatched call;
5. finite values over PROBE_STEPS steps of the real optax wrapper (rule_optimizer) on random
   gradients, state fed back step to step.

The rule is not differentiated by the trainer, so no gradient check applies. A rule whose
update points along the gradient on average (ascent) gets a WARNING, not a failure.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from metarl.tasks.optimizer.plug import MOMENTUM_DECAYS, NUM_STATE_SLOTS, rule_optimizer
from metarl.tasks.probing import (
    ProbeFailure,
    ProbeReport,
    call,
    check_array,
    first_nonfinite,
    run_checks,
)

SHAPES = ((6, 5), (7,))
PROBE_STEPS = 12
LR = 2.5e-4
EXPECTED = (
    "a tuple (update, new_state): update float32 with the parameter's shape, new_state float32 "
    f"of shape [{NUM_STATE_SLOTS}, *parameter shape]"
)


def _inputs(rng: np.random.Generator, shape: tuple, state_scale: float = 0.0):
    grad = rng.normal(0.0, 0.1, shape).astype(np.float32)
    param = rng.normal(0.0, 0.3, shape).astype(np.float32)
    momentum = (rng.normal(0.0, 0.05, (len(MOMENTUM_DECAYS),) + shape)).astype(np.float32)
    # non-negative, like the second-moment slots of Adam-style rules (sqrt stays defined)
    state = np.abs(state_scale * rng.normal(0.0, 1.0, (NUM_STATE_SLOTS,) + shape)).astype(
        np.float32
    )
    return grad, param, momentum, state


def _scalars(step: int = 3, progress: float = 0.3, lr: float = LR):

    return (
        jnp.asarray(step, jnp.int32),
        jnp.asarray(progress, jnp.float32),
        jnp.asarray(lr, jnp.float32),
    )


def _split(out, context: str):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        if isinstance(out, (tuple, list)):
            got = f"a {type(out).__name__} of length {len(out)}"
        elif hasattr(out, "shape"):
            got = f"a single array of shape {tuple(out.shape)}"
        else:
            got = f"a {type(out).__name__}"
        raise ProbeFailure(f"optimizer returned {got}{context}; expected {EXPECTED}")
    return out


def probes(rule: Callable, rng_seed: int) -> ProbeReport:

    rng = np.random.default_rng(rng_seed)
    jitted = jax.jit(rule)
    state: dict = {}

    def compiles_and_shapes(warnings):
        for shape in SHAPES:
            arrays = _inputs(rng, shape, state_scale=0.01)
            context = f" for a parameter of shape {shape}"
            out = call(
                f"calling optimizer(grad, param, momentum, state, step, progress, lr) under "
                f"jax.jit with a parameter of shape {shape}",
                jitted,
                *map(jnp.asarray, arrays),
                *_scalars(),
                expected=EXPECTED,
            )
            update, new_state = _split(out, context)
            update = check_array(update, "update", shape, context=context)
            new_state = check_array(
                new_state, "new_state", (NUM_STATE_SLOTS,) + shape, context=context
            )
            for name, values in (("update", update), ("new_state", new_state)):
                bad = first_nonfinite(values)
                if bad is not None:
                    raise ProbeFailure(
                        f"{name} contains {values.ravel()[bad]}{context} (grad ~ N(0, 0.1), "
                        f"step 3, lr {LR}); expected finite values"
                    )
            state[shape] = (arrays, update, new_state)
            if shape == SHAPES[0]:
                grad = arrays[0].astype(np.float64).ravel()
                if np.dot(update.astype(np.float64).ravel(), grad) > 0:
                    warnings.append(
                        "the update points along the gradient on average (gradient ascent); "
                        "a descent step is negative, e.g. -lr * grad"
                    )

    def elementwise(warnings):
        shape = SHAPES[0]
        arrays, update, new_state = state[shape]
        size = int(np.prod(shape))
        changed = np.zeros(size, bool)
        changed[rng.choice(size, size // 3, replace=False)] = True
        mask = changed.reshape(shape)
        perturbed = []
        for index, array in enumerate(arrays):
            noise = rng.normal(0.0, 0.1 if index < 3 else 0.01, array.shape).astype(np.float32)
            changed_array = array + noise if index < 3 else np.abs(array + noise)
            perturbed.append(np.where(mask, changed_array, array).astype(np.float32))
        out = call(
            "calling optimizer on perturbed inputs",
            jitted,
            *map(jnp.asarray, perturbed),
            *_scalars(),
        )
        update2, new_state2 = (np.asarray(x) for x in _split(out, ""))
        same_update = np.allclose(
            update2[~mask], update[~mask], rtol=1e-5, atol=1e-8, equal_nan=True
        )
        same_state = np.allclose(
            new_state2[:, ~mask], new_state[:, ~mask], rtol=1e-5, atol=1e-8, equal_nan=True
        )
        if not (same_update and same_state):
            which = "update" if not same_update else "new_state"
            raise ProbeFailure(
                f"the rule is not elementwise: changing some elements of the inputs changed other "
                f"elements of {which}; each output element may depend only on the same element of "
                "grad, param, momentum and state (no sums, means, norms or other reductions over "
                "the parameter)"
            )
        permutation = rng.permutation(size)

        def permute(array, leading):
            flat = array.reshape(array.shape[:leading] + (size,))
            return flat[..., permutation].reshape(array.shape)

        permuted = [permute(a, 0 if i < 2 else 1) for i, a in enumerate(arrays)]
        out = call(
            "calling optimizer on permuted inputs", jitted, *map(jnp.asarray, permuted), *_scalars()
        )
        update3, new_state3 = (np.asarray(x) for x in _split(out, ""))
        if not (
            np.allclose(update3, permute(update, 0), rtol=1e-5, atol=1e-8, equal_nan=True)
            and np.allclose(new_state3, permute(new_state, 1), rtol=1e-5, atol=1e-8, equal_nan=True)
        ):
            raise ProbeFailure(
                "the rule is not elementwise: permuting the elements of the parameter (and of "
                "grad, "
                "momentum and state alike) did not permute the outputs the same way; do not use "
                "positions (arange, roll, sort, indexing along the parameter axes)"
            )

    def vmaps(warnings):
        shape = SHAPES[1]
        batch = 3
        arrays = [np.stack([a] * batch) for a in state[shape][0]]
        batched = jax.jit(jax.vmap(rule, in_axes=(0, 0, 0, 0, None, None, None)))
        out = call(
            f"calling jax.vmap(optimizer) over a leading axis of size {batch}",
            batched,
            *map(jnp.asarray, arrays),
            *_scalars(),
        )
        update, new_state = _split(out, " under jax.vmap")
        update = check_array(update, "update under jax.vmap", (batch,) + shape)
        new_state = check_array(
            new_state, "new_state under jax.vmap", (batch, NUM_STATE_SLOTS) + shape
        )
        if not np.allclose(update[1], state[shape][1], rtol=1e-5, atol=1e-8, equal_nan=True):
            raise ProbeFailure("optimizer gives different updates under jax.vmap than without it")

    def runs_finite(warnings):

        params = {
            "w": jnp.asarray(rng.normal(0, 0.3, SHAPES[0]), jnp.float32),
            "b": jnp.zeros(SHAPES[1], jnp.float32),
        }
        grads = jax.tree.map(
            lambda p: jnp.asarray(rng.normal(0, 0.1, (PROBE_STEPS,) + p.shape), jnp.float32), params
        )
        optimizer = rule_optimizer(rule, lambda count: LR * (1.0 - count / (2 * PROBE_STEPS)))

        def run(params, grads):
            def step(carry, g):
                params, opt_state = carry
                updates, opt_state = optimizer.update(g, opt_state, params)
                params = jax.tree.map(lambda p, u: p + u, params, updates)
                finite = jnp.all(
                    jnp.stack(
                        [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves((updates, opt_state))]
                    )
                )
                return (params, opt_state), finite

            _, finite = jax.lax.scan(step, (params, optimizer.init(params)), grads)
            return finite

        finite = np.asarray(
            call(
                f"running the rule for {PROBE_STEPS} steps inside the optax wrapper used in "
                "training",
                jax.jit(run),
                params,
                grads,
            )
        )
        if not finite.all():
            first = int(np.flatnonzero(~finite)[0]) + 1
            raise ProbeFailure(
                f"the update or the state became nan/inf at step {first} of {PROBE_STEPS} on "
                "random "
                "gradients (state fed back step to step); expected finite values (guard divisions "
                "and square roots, e.g. with an epsilon)"
            )

    return run_checks(
        [
            ("compiles_and_shapes", compiles_and_shapes),
            ("elementwise", elementwise),
            ("vmaps", vmaps),
            ("finite_over_steps", runs_finite),
        ]
    )


def fingerprint_inputs() -> tuple:
    """A fixed batch (nonzero state, mid-training step) on which the rule's outputs are hashed."""

    rng = np.random.default_rng(20240611)
    grad, param, momentum, state = _inputs(rng, (48,), state_scale=0.01)
    return (
        *map(jnp.asarray, (grad, param, momentum, state)),
        jnp.asarray(5, jnp.int32),
        jnp.asarray(0.25, jnp.float32),
        jnp.asarray(1e-3, jnp.float32),
    )
