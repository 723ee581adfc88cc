"""Probes for the `value_loss` task: cheap checks of a candidate critic loss before training.

Like every task's probes they run in the sandboxed tracer on the candidate's Python and in the
trainer on the exported artifact, on inputs drawn fresh from each evaluation's rng seed:

1. compiles under jax.jit; 2. float32 with exactly the shape of `value` (1-D and 2-D);
3. finite values, on the probe batch and on a wide batch (|inputs| up to 1e3: returns grow);
4. elementwise (permuting or halving the batch permutes or halves the outputs); 5. vmaps;
6. a finite gradient with respect to `value` (training follows it);
7. that gradient is the slope of the values: it lies between the one-sided finite differences
   (steps FD_STEPS x max(1, |value|)) within FD_RTOL x scale + FD_ATOL, for some step, so a
   stop_gradient forger (a loss's values with another gradient) fails;
8. >= 0 (beyond -NEGATIVE_TOLERANCE) everywhere;
9. it pulls toward the target: (value - target) x gradient >= -PULL_TOLERANCE everywhere, and
   > 0 where value == old_value and |value - target| >= 0.1 (there PPO's clipping is not
   active, so every loss that trains the critic has a slope). A loss that pushes the critic
   away, or ignores it, trains no critic.

Measured on seeds 0-19 (as Python): PPO's clipped loss, plain squared error and Huber pass on
every one; a negated loss, a stopped or forged gradient, a loss of 0, one that pushes away from
the target and a batch mean each fail (tests/test_value_loss.py keeps them).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from metarl.tasks.probing import (
    ProbeFailure,
    ProbeReport,
    call,
    check_array,
    check_independent_samples,
    check_same_in_2d,
    check_vmaps,
    first_nonfinite,
    run_checks,
    slope_disagreements,
)

EPSILON = 0.2  # the trainer's clip_eps default, static as in training
BATCH = 64
ARGUMENTS = "value, old_value and target"  # what each output element may depend on
NEGATIVE_TOLERANCE = 1e-5
PULL_TOLERANCE = 1e-5
PULL_GAP = 0.1
FD_STEPS = (1e-3, 1e-4)
FD_RTOL = 1e-2
FD_ATOL = 1e-3
EXPECTED_SHAPE = "a float32 array with exactly the shape of `value` (elementwise, no reductions)"

Inputs = tuple[np.ndarray, np.ndarray, np.ndarray]


def probe_inputs(rng_seed: int, batch: int = BATCH) -> Inputs:
    """(value, old_value, target) for `rng_seed`: half the samples have value == old_value,
    the other half moved by up to a few clip ranges; targets near and far."""
    rng = np.random.default_rng([rng_seed, 7])
    value = rng.normal(0.0, 3.0, batch)
    old = value + rng.normal(0.0, 2.0 * EPSILON, batch)
    old[: batch // 2] = value[: batch // 2]
    target = value + rng.normal(0.0, 2.0, batch)
    target[:4] = value[:4] + np.array([1.0, -1.0, 20.0, -20.0])
    return tuple(x.astype(np.float32) for x in (value, old, target))


def wide_inputs(rng_seed: int, batch: int = BATCH) -> Inputs:
    """A batch where returns have grown: |values| and targets up to ~1e3."""
    rng = np.random.default_rng([rng_seed, 8])
    scale = np.exp(rng.uniform(0.0, np.log(1e3), batch))
    value = rng.normal(0.0, 1.0, batch) * scale
    old = value + rng.normal(0.0, 1.0, batch) * np.sqrt(scale)
    target = rng.normal(0.0, 1.0, batch) * scale
    return tuple(x.astype(np.float32) for x in (value, old, target))


def _at(inputs: Inputs, index: int) -> str:
    value, old, target = (float(x.ravel()[index]) for x in inputs)
    return f"value={value:.4g}, old_value={old:.4g}, target={target:.4g}"


def value_slope_disagreements(values: Callable, grad: Callable, inputs: Inputs) -> np.ndarray:
    """Indices where d loss / d value is not a slope of the values (probing.py's check, with
    steps FD_STEPS x max(1, |value|))."""
    value, old, target = inputs
    rest = (jnp.asarray(old), jnp.asarray(target))
    slope = np.asarray(grad(jnp.asarray(value), *rest), np.float64)
    widths = [step * np.maximum(1.0, np.abs(value.astype(np.float64))) for step in FD_STEPS]
    return slope_disagreements(
        lambda v: np.asarray(values(jnp.asarray(v), *rest)), value, slope, widths, FD_RTOL, FD_ATOL
    )


def probes(value_loss: Callable, rng_seed: int) -> ProbeReport:
    """The checks above on `value_loss` (the candidate's Python or the verified artifact)."""
    batches = [probe_inputs(rng_seed), wide_inputs(rng_seed)]
    value, old, target = batches[0]
    shape = value.shape
    applied = jax.jit(lambda v, o, t: value_loss(v, o, t, EPSILON))
    grad = jax.jit(jax.grad(lambda v, o, t: jnp.sum(value_loss(v, o, t, EPSILON))))
    state: dict = {}

    def arrays(inputs):
        return tuple(jnp.asarray(x) for x in inputs)

    def compiles(warnings):
        state["out"] = call(
            f"calling value_loss(value, old_value, target, {EPSILON}) under jax.jit on inputs "
            f"of shape {shape}",
            applied,
            *arrays(batches[0]),
            expected=EXPECTED_SHAPE,
        )

    def shape_and_dtype(warnings):
        state["values"] = [
            check_array(state["out"], "value_loss's result", shape).astype(np.float64)
        ]
        check_same_in_2d("value_loss", applied, batches[0], state["values"][0])

    def finite(warnings):
        wide = call(
            "calling value_loss on a wide batch (|inputs| up to 1e3)", applied, *arrays(batches[1])
        )
        state["values"].append(check_array(wide, "value_loss's result", shape).astype(np.float64))
        for inputs, values in zip(batches, state["values"]):
            bad = first_nonfinite(values)
            if bad is not None:
                raise ProbeFailure(
                    f"value_loss returned {values[bad]} at {_at(inputs, bad)}; expected finite "
                    "values for any finite inputs"
                )

    def elementwise(warnings):
        rng = np.random.default_rng([rng_seed, 9])
        check_independent_samples(
            "value_loss", applied, batches[0], state["values"][0], rng, ARGUMENTS
        )

    def vmaps(warnings):
        unjitted = lambda v, o, t: value_loss(v, o, t, EPSILON)  # noqa: E731
        check_vmaps("value_loss", unjitted, batches[0], state["values"][0])

    def finite_gradient(warnings):
        state["grads"] = []
        for inputs in batches:
            slopes = np.asarray(
                call(
                    "differentiating sum(value_loss(...)) with respect to value",
                    grad,
                    *arrays(inputs),
                ),
                np.float64,
            )
            bad = first_nonfinite(slopes)
            if bad is not None:
                raise ProbeFailure(
                    f"the gradient of value_loss with respect to value is {slopes[bad]} at "
                    f"{_at(inputs, bad)}; expected finite gradients"
                )
            state["grads"].append(slopes)

    def gradient_of_values(warnings):
        for inputs, slopes in zip(batches, state["grads"]):
            bad = value_slope_disagreements(applied, grad, inputs)
            if bad.size:
                at = int(bad[0])
                raise ProbeFailure(
                    f"the gradient of value_loss with respect to value ({slopes[at]:.4g} at "
                    f"{_at(inputs, at)}) is not the slope of its values there (finite "
                    f"differences disagree at {bad.size} of {slopes.size} points); the trainer "
                    "follows the gradient (no jax.lax.stop_gradient or custom gradients)"
                )

    def non_negative(warnings):
        for inputs, values in zip(batches, state["values"]):
            worst = int(np.argmin(values))
            if values[worst] < -NEGATIVE_TOLERANCE:
                raise ProbeFailure(
                    f"value_loss is negative ({values[worst]:.4g} at {_at(inputs, worst)}); a "
                    "loss must be >= 0 everywhere"
                )

    def pulls_toward_target(warnings):
        for inputs, slopes in zip(batches, state["grads"]):
            value, old, target = (x.astype(np.float64) for x in inputs)
            pull = (value - target) * slopes
            worst = int(np.argmin(pull))
            if pull[worst] < -PULL_TOLERANCE:
                raise ProbeFailure(
                    f"value_loss pushes the critic away from its target at {_at(inputs, worst)} "
                    f"(d loss / d value = {slopes[worst]:.4g}); gradient descent must move "
                    "value toward target"
                )
            free = (value == old) & (np.abs(value - target) >= PULL_GAP)
            idle = np.flatnonzero(free & ~(pull > 0))
            if idle.size:
                at = int(idle[0])
                raise ProbeFailure(
                    f"value_loss does not pull the critic toward its target at {_at(inputs, at)} "
                    f"(d loss / d value = {slopes[at]:.4g}); where value == old_value and the "
                    f"target is {PULL_GAP:g} or more away, the loss must have a slope"
                )

    return run_checks(
        [
            ("compiles", compiles),
            ("shape_and_dtype", shape_and_dtype),
            ("finite", finite),
            ("elementwise", elementwise),
            ("vmaps", vmaps),
            ("finite_gradient", finite_gradient),
            ("gradient_of_values", gradient_of_values),
            ("non_negative", non_negative),
            ("pulls_toward_target", pulls_toward_target),
        ]
    )


def fingerprint_inputs() -> tuple:
    """A fixed grid of (value, old_value, target) samples; epsilon is static, as in training."""
    value, gap, error = np.meshgrid(
        np.linspace(-3.0, 3.0, 7, dtype=np.float32),
        np.array([-0.5, -0.1, 0.0, 0.1, 0.5], np.float32),
        np.linspace(-4.0, 4.0, 9, dtype=np.float32),
    )
    value = value.ravel()
    return (
        jnp.asarray(value),
        jnp.asarray(value + gap.ravel()),
        jnp.asarray(value + error.ravel()),
        EPSILON,
    )
