"""Probes for the `drift` task: cheap checks of a candidate drift before any training.

They run twice: in the sandboxed tracer on the candidate's Python (reasons written for the LLM)
and in the trainer on the exported artifact (the program that is trained; its gradient is the
artifact's own VJP). On fresh random inputs (a new rng seed per evaluation, so a program cannot
special-case them):

1. compiles under jax.jit (Python control flow or numpy on traced values fails here);
2. returns a float32 array of exactly the shape of `ratio` (1-D and 2-D inputs; no silent
   broadcasting, no reductions);
3. is elementwise: permuting the inputs permutes the outputs (no means/sums over the batch);
4. vmaps, with the same values as the unbatched call;
5. finite values, for ratio in [0.05, 20] and any advantage;
6. finite gradient with respect to ratio (the trainer differentiates through the drift);
7. the gradient is the gradient of the values: at every probe point but ratio = 1, d drift /
   d ratio (what training follows) lies between the one-sided finite differences of the values
   (steps FD_STEPS x ratio, both sides), within FD_RTOL x scale + FD_ATOL, for some step.
   One-sided differences on both sides keep a kink (PPO-clip's at 1 +- eps) from failing: the
   gradient there is one of the two slopes. A stop_gradient-style forger (values of PPO-clip,
   another gradient) fails at most points. Measured over 50 probe seeds on PPO-clip, LPO, three
   LPO networks (weights x3), a symbolic drift, KL-, tanh- and quadratic drifts, as Python and
   as artifacts: no disagreeing point (none allowed); at 10x tighter tolerances 2 of ~64,000
   points disagree; the forgers (gradient negated, x0.9, stopped, changed for |A| > 1.5)
   disagree at 7 to 63 of 63 points for every seed. The check also covers where training
   goes, not only where the probe batch lies: `training_inputs` adds two batches with
   heavy-tailed advantages up to the largest |A| the trainer can produce (32) and ratios
   across and around the clip range, since a forger can gate its gradient on |A| > 4, which
   the probe batch (normalised, plus +-3) essentially never reaches while training's
   per-minibatch normalised advantages do (measured over 200 probe seeds: PPO-clip's values
   with a negative drift's gradient for |A| > 4, or a negated one for |A| > 8, were caught
   by the probe batch alone for 0 seeds, with the training-range batches for 200, at 28 or
   more points each). Values there must be finite and >= 0 too;
8. the drift invariants, each a FAILURE (they are mirror learning's guarantee, not style):
   - drift < -NEGATIVE_TOLERANCE anywhere (a negative drift rewards moving away from the old
     policy);
   - |drift(1, A)| > ZERO_TOLERANCE or |d drift/d ratio (1, A)| > GRADIENT_TOLERANCE for an
     advantage of the probe batch or of the training range (|A| <= 32: advantages are
     normalised per minibatch of M samples, so |A| <= sqrt(M - 1), 32 for MinAtar's 1024): a
     penalty or a push before the policy moves. PPO-clip, LPO and the LPO-network and
     symbolic exports are exactly 0 with a slope of exactly 0 there.
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

EPSILON = 0.2  # the trainer's clip_eps default; passed as a static Python float, as in training
BATCH = 64
ARGUMENTS = "ratio and advantage"  # what each output element may depend on
NEGATIVE_TOLERANCE = 1e-5
ZERO_TOLERANCE = 1e-5
GRADIENT_TOLERANCE = 1e-4
FD_STEPS = (1e-3, 1e-4)  # relative to ratio
FD_RTOL = 1e-2
FD_ATOL = 1e-3
# normalised over a minibatch of M samples, |A| <= sqrt(M - 1): 11.3 for classic control's
# M = 128, 32 for MinAtar's M = 1024
TRAINING_ADVANTAGES = np.linspace(-32.0, 32.0, BATCH, dtype=np.float32)
EXPECTED_SHAPE = "a float32 array with exactly the shape of `ratio` (elementwise, no reductions)"


def probe_inputs(rng_seed: int, batch: int = BATCH) -> tuple[np.ndarray, np.ndarray]:
    """The probes' (ratio, advantage) batch for `rng_seed`: random, with edge ratios."""
    rng = np.random.default_rng(rng_seed)
    log_ratio = rng.normal(0.0, 0.6, batch)
    # include the edges of the typical range and a few far values
    log_ratio[:6] = np.log([0.05, 0.5, 1.0, 2.0, 20.0, 1.0 + 1e-3])
    ratio = np.exp(log_ratio).astype(np.float32)
    advantage = rng.normal(0.0, 1.0, batch)
    advantage = ((advantage - advantage.mean()) / (advantage.std() + 1e-8)).astype(np.float32)
    advantage[:2] = [3.0, -3.0]
    return ratio, advantage


def training_inputs(rng_seed: int, batch: int = BATCH) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two batches of (ratio, advantage) where training goes and the probe batch does not.

    Advantages: half heavy-tailed (Student t with 1.5 degrees of freedom, scaled) and half
    log-uniform in magnitude on [1, 32], both clipped to +-32: advantages are normalised per
    minibatch of M samples, so |A| <= sqrt(M - 1) (32 for MinAtar's M = 1024). Ratios:
    log-uniform on [0.05, 20], with a quarter within 0.5 epsilon of the clip edges 1 +- eps
    (where PPO's trust region acts). Drawn from `rng_seed`, so no program can special-case them.

    Args:
        rng_seed: the probes' seed (fresh per evaluation).
        batch: points per batch (the probe batch's size: no new compile).

    Returns:
        Two (ratio, advantage) float32 batches.
    """
    rng = np.random.default_rng([rng_seed, 1])
    out = []
    for _ in range(2):
        half = batch // 2
        heavy = rng.standard_t(1.5, half) * 4.0
        magnitude = np.exp(rng.uniform(0.0, np.log(32.0), batch - half))
        signs = rng.choice([-1.0, 1.0], batch - half)
        advantage = np.clip(np.concatenate([heavy, signs * magnitude]), -32.0, 32.0)
        log_ratio = rng.uniform(np.log(0.05), np.log(20.0), batch)
        edges = batch // 4
        edge = rng.choice([1.0 - EPSILON, 1.0 + EPSILON], edges)
        log_ratio[:edges] = np.log(edge + rng.uniform(-0.5, 0.5, edges) * EPSILON)
        out.append((np.exp(log_ratio).astype(np.float32), advantage.astype(np.float32)))
    return out


def _at(ratio, advantage, index) -> str:
    return (
        f"ratio={float(ratio.ravel()[index]):.4g}, advantage={float(advantage.ravel()[index]):.4g}"
    )


def gradient_disagreements(
    values: Callable, grad: Callable, ratio: np.ndarray, advantage: np.ndarray
) -> np.ndarray:
    """Where d drift / d ratio is not a slope of the values (see check 7 at the top).

    Args:
        values: (ratio, advantage) -> drift values (jitted).
        grad: (ratio, advantage) -> d sum(drift) / d ratio (jitted).
        ratio, advantage: float32 points (the caller ignores the verdict at ratio = 1, where
            mirror learning's drifts have their kinks).

    Returns:
        The indices of the points where the gradient lies outside the one-sided finite
        differences of the values, for every step tried.
    """
    slope = np.asarray(grad(jnp.asarray(ratio), jnp.asarray(advantage)), np.float64)
    return slope_disagreements(
        lambda r: np.asarray(values(jnp.asarray(r), jnp.asarray(advantage))),
        ratio,
        slope,
        [ratio.astype(np.float64) * step for step in FD_STEPS],
        FD_RTOL,
        FD_ATOL,
    )


def probes(drift: Callable, rng_seed: int) -> ProbeReport:

    ratio, advantage = probe_inputs(rng_seed)
    shape = ratio.shape
    applied = jax.jit(lambda ratio, advantage: drift(ratio, advantage, EPSILON))
    state: dict = {}
    training = training_inputs(rng_seed)

    def compiles(warnings):
        state["out"] = call(
            f"calling drift(ratio, advantage, {EPSILON}) under jax.jit with ratio and advantage "
            f"of shape {shape}",
            applied,
            jnp.asarray(ratio),
            jnp.asarray(advantage),
            expected=EXPECTED_SHAPE,
        )

    def shape_and_dtype(warnings):
        state["values"] = check_array(
            state["out"], "drift's result", shape, context=f" for ratio of shape {shape}"
        ).astype(np.float64)
        check_same_in_2d("drift", applied, (ratio, advantage), state["values"])

    def finite(warnings):
        state["training_values"] = [
            np.asarray(
                call("calling drift on training-range inputs", applied, *map(jnp.asarray, batch)),
                np.float64,
            )
            for batch in training
        ]
        for (r, a), values in [((ratio, advantage), state["values"])] + list(
            zip(training, state["training_values"])
        ):
            bad = first_nonfinite(values)
            if bad is not None:
                raise ProbeFailure(
                    f"drift returned {values[bad]} at {_at(r, a, bad)}; expected finite values "
                    "for every ratio in (0, inf) and every advantage"
                )

    def elementwise(warnings):
        rng = np.random.default_rng(rng_seed + 1)
        inputs = (ratio, advantage)
        check_independent_samples("drift", applied, inputs, state["values"], rng, ARGUMENTS)

    def vmaps(warnings):
        unjitted = lambda ratio, advantage: drift(ratio, advantage, EPSILON)  # noqa: E731
        check_vmaps("drift", unjitted, (ratio, advantage), state["values"])

    def gradient(warnings):
        grad = jax.jit(jax.grad(lambda ratio, advantage: jnp.sum(drift(ratio, advantage, EPSILON))))
        out = call(
            "differentiating sum(drift(ratio, advantage, epsilon)) with respect to ratio",
            grad,
            jnp.asarray(ratio),
            jnp.asarray(advantage),
        )
        values = np.asarray(out, dtype=np.float64)
        bad = first_nonfinite(values)
        if bad is not None:
            raise ProbeFailure(
                f"the gradient of drift with respect to ratio is {values[bad]} at "
                f"{_at(ratio, advantage, bad)}; expected finite gradients (avoid log/sqrt/division "
                "at points where they blow up, or guard them with jnp.where on both branches)"
            )
        state["grad"] = grad

    def non_negative(warnings):
        for (r, a), values in [((ratio, advantage), state["values"])] + list(
            zip(training, state["training_values"])
        ):
            worst = int(np.argmin(values))
            if values[worst] < -NEGATIVE_TOLERANCE:
                raise ProbeFailure(
                    f"drift is negative ({values[worst]:.4g} at {_at(r, a, worst)}); a drift "
                    "must be >= 0 everywhere (e.g. wrap it in jax.nn.relu or square it)"
                )

    def gradient_of_values(warnings):
        # the probe batch and the training-range batches (shapes already compiled), ratio = 1
        # left out of the verdict
        for r, a in [(ratio, advantage), *training]:
            slopes = np.asarray(state["grad"](jnp.asarray(r), jnp.asarray(a)), np.float64)
            bad = first_nonfinite(slopes)
            if bad is not None:
                raise ProbeFailure(
                    f"the gradient of drift with respect to ratio is {slopes[bad]} at "
                    f"{_at(r, a, bad)}; expected finite gradients"
                )
            bad = gradient_disagreements(applied, state["grad"], r, a)
            bad = bad[r[bad] != 1.0]
            if bad.size:
                at = int(bad[0])
                raise ProbeFailure(
                    f"the gradient of drift with respect to ratio ({slopes[at]:.4g} at "
                    f"{_at(r, a, at)}) is not the slope of its values there (finite "
                    f"differences of the values disagree at {bad.size} of {r.size} points); "
                    "the trainer follows the gradient, so it must be the derivative of the drift "
                    "(no jax.lax.stop_gradient or custom gradients)"
                )

    def zero_at_one(warnings):
        points = np.concatenate([advantage, TRAINING_ADVANTAGES])
        ones = jnp.ones_like(jnp.asarray(advantage))
        # two calls of the probe batch's shape (already compiled), not one of twice its size
        values, grads = (
            np.concatenate(
                [np.asarray(f(ones, jnp.asarray(a)), np.float64) for a in np.split(points, 2)]
            )
            for f in (applied, state["grad"])
        )
        worst = int(np.argmax(np.abs(values)))
        if not abs(values[worst]) <= ZERO_TOLERANCE:
            raise ProbeFailure(
                f"drift is {values[worst]:.3g} (not 0) at ratio=1, advantage={points[worst]:.3g}: "
                "a drift must be 0 before the policy moves (mirror learning's guarantee needs "
                f"|drift(1, A)| <= {ZERO_TOLERANCE:g} for every advantage; e.g. subtract the "
                "same expression evaluated at ratio=1)"
            )
        worst = int(np.argmax(np.abs(grads)))
        if not abs(grads[worst]) <= GRADIENT_TOLERANCE:
            raise ProbeFailure(
                f"d drift / d ratio is {grads[worst]:.3g} (not 0) at ratio=1, "
                f"advantage={points[worst]:.3g}: a drift must be flat before the policy moves "
                f"(|d drift / d ratio| <= {GRADIENT_TOLERANCE:g} at ratio=1 for every "
                "advantage; e.g. use (ratio - 1)**2 or a clip/relu that is flat around 1)"
            )

    return run_checks(
        [
            ("compiles", compiles),
            ("shape_and_dtype", shape_and_dtype),
            ("finite", finite),
            ("elementwise", elementwise),
            ("vmaps", vmaps),
            ("finite_gradient", gradient),
            ("gradient_of_values", gradient_of_values),
            ("non_negative", non_negative),
            ("zero_at_ratio_one", zero_at_one),
        ]
    )


def fingerprint_inputs() -> tuple:
    """A fixed grid of (ratio, advantage) pairs; epsilon is static, as in training."""

    ratio, advantage = np.meshgrid(
        np.geomspace(0.25, 4.0, 17, dtype=np.float32), np.linspace(-2.5, 2.5, 16, dtype=np.float32)
    )
    return jnp.asarray(ratio.ravel()), jnp.asarray(advantage.ravel()), EPSILON
