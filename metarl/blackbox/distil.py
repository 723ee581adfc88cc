"""Black-box distillation: fit an LPO network of another width to a teacher drift.

Goldie et al. (RLC 2025, "How Should We Meta-Learn RL Algorithms?") distil a meta-learned drift
into a fresh network (another width: smaller for speed, or the same width for regularisation)
by matching, on a grid of (ratio, advantage) pairs, the gradient of the policy objective with
respect to the ratio, i.e. d drift / d r: the gradient is all PPO-style training ever sees of the
drift. Adam, learning rate annealed 1e-4 -> 1e-5. The teacher can be anything that can be
sampled: an ES mean, an LLM-discovered program (sampled in the sandbox by `Evaluator.sample`),
a seed program; the student is an ordinary LPO network (rl/lpo.py) that `export.lpo_source`
turns back into a candidate for the cascade.

Choices, and why:

- **Schedule: linear** from `lr_start` to `lr_end` over all steps, as the paper's code does
  (`optax.linear_schedule`); a cosine would spend fewer steps near 1e-4, where the fit makes
  most of its progress at these short CPU budgets.
- **Initialisation: flax's default** (`init_params`, LeCun-normal kernels), as in the paper's
  code, and neither zeros nor a small scale. With all-zero kernels every gradient path passes
  through a zero kernel (d net / d W1 has a factor W2 = 0, d net / d W2 = tanh(0) = 0): a
  saddle Adam never leaves. A *small* initialisation is stuck too: the LPO drift passes the
  network through a dead zone (|net| < 1e-4 adds nothing and has zero gradient), so a network
  that starts inside it gets no gradient at all. The default scale puts |net| at O(1) on the
  grid, outside the dead zone.
- **Minibatches** of grid points drawn uniformly with replacement from an explicit key per step,
  and the whole run is one jitted `lax.scan`.

Measured (this 2-CPU machine, shared with other jobs; times include compilation): distilling
the DPO seed program (`seed_program("lpo")`, sampled on the 128 x 128 grid; slope variance 73.3)
into width 32 with the defaults (10,000 steps of 1024 points, slope objective, 1e-4 -> 1e-5)
takes 4-6 s and brings the slope MSE from 60.3 at initialisation (PPO-clip itself: 46.0) to
0.317 (value MSE 3.62 -> 0.060); 2,000 steps reach only 8.08, hence the default. Width 128:
0.174 in 12 s. A 10x higher learning rate (1e-3 -> 1e-4) reaches 0.229 in 2,000 steps (1.7 s).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from metarl.rl.lpo import LPO_HIDDEN, DriftSamples, MetaParams, init_params, lpo_drift

logger = logging.getLogger(__name__)

OBJECTIVES = ("slope", "value", "both")


@dataclass(frozen=True)
class DistilSettings:
    """How a student network is fitted to a teacher's samples.

    Attributes:
        hidden: the student's width.
        steps: Adam steps (one minibatch each).
        batch_size: grid points per minibatch (drawn with replacement).
        lr_start, lr_end: the learning rate, annealed linearly from one to the other.
        objective: "slope" (MSE on d drift / d ratio: the paper's), "value" (MSE on the drift)
            or "both" (their sum).
        points: grid points per axis the teacher is sampled on (callers sample with it).
        epsilon: PPO's clip range inside the student's drift (and the teacher's sampling).
        log_every: `DistilResult.losses` holds the mean loss of each window of this many steps.
        rng_seed: seeds the initialisation and the minibatches.
    """

    hidden: int = LPO_HIDDEN
    steps: int = 10_000
    batch_size: int = 1024
    lr_start: float = 1e-4
    lr_end: float = 1e-5
    objective: str = "slope"
    points: int = 128
    epsilon: float = 0.2
    log_every: int = 50
    rng_seed: int = 0


class DistilResult(NamedTuple):
    """A distilled student and how well it fits the teacher.

    Attributes:
        params: the student's LPONetwork parameters.
        losses: the mean minibatch loss of each window of `log_every` steps.
        value_error: MSE of the student's drift against the teacher's, on all samples.
        slope_error: MSE of the student's d drift / d ratio against the teacher's, on all samples.
    """

    params: MetaParams
    losses: np.ndarray
    value_error: float
    slope_error: float


def student_samples(
    params: MetaParams, ratio: jax.Array, advantage: jax.Array, epsilon: float
) -> tuple[jax.Array, jax.Array]:
    """The LPO drift of `params` and its d drift / d ratio at each (ratio, advantage) pair.

    Args:
        params: LPONetwork parameters.
        ratio, advantage: flat arrays of one length.
        epsilon: PPO's clip range.

    Returns:
        (value, slope), each with the shape of `ratio`.
    """

    def one(r: jax.Array, a: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.value_and_grad(lambda x: lpo_drift(params, x, a, epsilon))(r)

    return jax.vmap(one)(ratio, advantage)


def _loss(
    params: MetaParams,
    batch: tuple[jax.Array, jax.Array, jax.Array, jax.Array],
    epsilon: float,
    objective: str,
) -> jax.Array:
    ratio, advantage, value, slope = batch
    student_value, student_slope = student_samples(params, ratio, advantage, epsilon)
    loss = jnp.zeros(())
    if objective in ("slope", "both"):
        loss = loss + jnp.mean(jnp.square(student_slope - slope))
    if objective in ("value", "both"):
        loss = loss + jnp.mean(jnp.square(student_value - value))
    return loss


def distillation_errors(
    params: MetaParams, samples: DriftSamples, epsilon: float = 0.2
) -> tuple[float, float]:
    """The MSE of a network's drift and of its slope against `samples`, over all of them.

    Args:
        params: LPONetwork parameters.
        samples: the teacher's samples.
        epsilon: PPO's clip range inside the network's drift.

    Returns:
        (value MSE, slope MSE).
    """
    value, slope = jax.jit(student_samples, static_argnums=3)(
        params, jnp.asarray(samples.ratio), jnp.asarray(samples.advantage), float(epsilon)
    )
    value_error = np.mean(np.square(np.asarray(value, np.float64) - samples.value))
    slope_error = np.mean(np.square(np.asarray(slope, np.float64) - samples.slope))
    return float(value_error), float(slope_error)


def _keys(settings: DistilSettings) -> tuple[jax.Array, jax.Array]:
    """(initialisation key, minibatch key) from the seed."""
    init_key, batch_key = jax.random.split(jax.random.PRNGKey(settings.rng_seed))
    return init_key, batch_key


def initial_params(settings: DistilSettings) -> MetaParams:
    """The student before distillation: flax's default initialisation at `settings.hidden`
    from the seed's initialisation key (see the module docstring for why not zeros).

    Args:
        settings: the width and seed.

    Returns:
        LPONetwork parameters.
    """
    return init_params(_keys(settings)[0], settings.hidden)


def _validate(samples: DriftSamples, settings: DistilSettings) -> None:
    if settings.objective not in OBJECTIVES:
        raise ValueError(f"objective {settings.objective!r} is not one of {OBJECTIVES}")
    if min(settings.hidden, settings.steps, settings.batch_size, settings.log_every) < 1:
        raise ValueError("hidden, steps, batch_size and log_every must be at least 1")
    arrays = [np.asarray(a) for a in samples]
    if (
        arrays[0].ndim != 1
        or arrays[0].size == 0
        or any(a.shape != arrays[0].shape for a in arrays)
    ):
        raise ValueError("the samples must be four flat arrays of one non-zero length")
    if not all(np.all(np.isfinite(a)) for a in arrays):
        raise ValueError("the samples must be finite")


def distil(samples: DriftSamples, settings: DistilSettings = DistilSettings()) -> DistilResult:
    """Fit a fresh LPO network of width `settings.hidden` to a teacher's samples.

    One jitted `lax.scan` of `settings.steps` Adam steps, each on a minibatch of grid points
    drawn from its own key; the learning rate falls linearly from `lr_start` to `lr_end`.

    Args:
        samples: the teacher's drift and slope on a grid (`rl.lpo.sample_drift`, or
            `Evaluator.sample` for untrusted source).
        settings: width, steps, minibatch, learning rates, objective, seed.

    Returns:
        The student, its loss curve and its errors on all samples.

    Raises:
        ValueError: unknown objective, non-positive sizes, or malformed or non-finite samples.
    """
    _validate(samples, settings)
    start = time.perf_counter()
    params = initial_params(settings)
    batch_key = _keys(settings)[1]
    optimizer = optax.adam(
        optax.linear_schedule(settings.lr_start, settings.lr_end, settings.steps)
    )
    data = tuple(jnp.asarray(a, jnp.float32) for a in samples)
    size = data[0].shape[0]

    def step(carry, key):
        params, opt_state = carry
        index = jax.random.randint(key, (settings.batch_size,), 0, size)
        batch = tuple(a[index] for a in data)
        loss, grads = jax.value_and_grad(_loss)(params, batch, settings.epsilon, settings.objective)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    @jax.jit
    def train(params: MetaParams) -> tuple[MetaParams, jax.Array]:
        keys = jax.random.split(batch_key, settings.steps)
        (params, _), losses = jax.lax.scan(step, (params, optimizer.init(params)), keys)
        return params, losses

    params, losses = train(params)
    value_error, slope_error = distillation_errors(params, samples, settings.epsilon)
    losses = np.asarray(losses, np.float64)
    windows = [
        losses[i : i + settings.log_every] for i in range(0, losses.size, settings.log_every)
    ]
    logger.info(
        "distilled into width %d: %d steps in %.1f s, slope MSE %.4g, value MSE %.4g",
        settings.hidden,
        settings.steps,
        time.perf_counter() - start,
        slope_error,
        value_error,
    )
    return DistilResult(params, np.array([w.mean() for w in windows]), value_error, slope_error)
