"""The LPO meta-network: a drift parameterised by a small network, for black-box meta-learning.

Learned Policy Optimisation (Lu et al., 2022) and the black-box arm of Goldie et al. (RLC 2025)
meta-learn the drift as a bias-free MLP `Dense(H) -> tanh -> Dense(1)` over 8 features of one
sample: `[r-1, (r-1)^2, log r, (log r)^2]` and each of them times the advantage. All 8 are 0 at
r = 1, so the bias-free network is exactly 0 there.

The drift adds the network to PPO-clip's drift:

    drift = relu(ppo_clip_drift + dead_zone(net, 1e-4))
    dead_zone(x, w) = relu(x - w) - relu(-x - w)        (0 on [-w, w], shifted identity outside)

so the drift is >= 0, is exactly 0 with zero slope in a neighbourhood of r = 1 (where |net| < w
and the clip is inactive), and all-zero weights give PPO-clip bit for bit (net = 0 exactly,
dead_zone(0) = 0 exactly, relu(d + 0) = d for d >= 0, and every gradient term through the
network is a product with a zero weight). The paper's code writes `relu(ppo + net - 1e-4)`,
which shifts the whole drift down by 1e-4 and so is not PPO at zero weights; the dead zone keeps
its purpose (a flat drift at r = 1) without the shift.

`make_meta_train(config, meta_drift)` gives `train(rng, meta_params)`: the meta-parameters are
an argument, so a population of networks times training seeds is one program (vmap over both),
compiled once per environment for a whole ES run. The trainer itself is untouched: without
meta-parameters it is `make_train` as before, bit for bit.

The same module samples a drift on the distillation grid (A in [-8, 8), r in [e^-2, e^2)):
its values and d drift / d r, which distillation and symbolic regression fit.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from metarl.rl.components import Components, DriftFn, ppo_clip_drift
from metarl.rl.configs import PPOConfig
from metarl.rl.trainer import TrainResult
from metarl.rl.trainers import make_train

LPO_HIDDEN = 128  # the paper's width
DEAD_ZONE = 1e-4  # |net| below this adds nothing (the drift stays flat at r = 1)
NUM_FEATURES = 8

MetaParams = Any  # a flax params pytree of LPONetwork


class LPONetwork(nn.Module):
    """Bias-free `Dense(hidden) -> tanh -> Dense(1)` over the 8 LPO features (last axis)."""

    hidden_size: int = LPO_HIDDEN

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:
        hidden = jnp.tanh(nn.Dense(self.hidden_size, use_bias=False, name="hidden")(features))
        return nn.Dense(1, use_bias=False, name="out")(hidden)[..., 0]


def lpo_features(ratio: jax.Array, advantage: jax.Array) -> jax.Array:
    """`[r-1, (r-1)^2, log r, (log r)^2]` and each times the advantage: shape ratio.shape + (8,)."""
    r1 = ratio - 1.0
    log_r = jnp.log(ratio)
    base = jnp.stack([r1, r1 * r1, log_r, log_r * log_r], axis=-1)
    return jnp.concatenate([base, base * advantage[..., None]], axis=-1)


def dead_zone(x: jax.Array, width: float = DEAD_ZONE) -> jax.Array:
    """0 on [-width, width], x - width above it, x + width below it."""
    return jax.nn.relu(x - width) - jax.nn.relu(-x - width)


def lpo_drift(
    params: MetaParams,
    ratio: jax.Array,
    advantage: jax.Array,
    epsilon: float,
    hidden_size: int | None = None,
) -> jax.Array:
    """The drift of meta-parameters `params` (see the module docstring); elementwise.

    Args:
        params: LPONetwork parameters; the width is read from them unless given.
        ratio, advantage: arrays of one shape (a scalar pair works too).
        epsilon: PPO's clip range, for the PPO-clip part.
        hidden_size: the network's width (default: from `params`).

    Returns:
        The drift, with the shape of `ratio`.
    """
    hidden_size = hidden_size or network_width(params)
    advantage = jnp.broadcast_to(advantage, jnp.shape(ratio))
    net = LPONetwork(hidden_size).apply(params, lpo_features(ratio, advantage))
    return jax.nn.relu(ppo_clip_drift(ratio, advantage, epsilon) + dead_zone(net))


def network_width(params: MetaParams) -> int:
    """The hidden width of LPONetwork parameters."""
    return int(params["params"]["hidden"]["kernel"].shape[-1])


def init_params(rng: jax.Array, hidden_size: int = LPO_HIDDEN) -> MetaParams:
    """Random LPONetwork parameters (flax's default initialisers)."""
    return LPONetwork(hidden_size).init(rng, jnp.zeros((NUM_FEATURES,), jnp.float32))


def zero_params(hidden_size: int = LPO_HIDDEN) -> MetaParams:
    """All-zero LPONetwork parameters: the drift is then exactly PPO-clip."""
    return jax.tree.map(jnp.zeros_like, init_params(jax.random.PRNGKey(0), hidden_size))


def weights(params: MetaParams) -> tuple[np.ndarray, np.ndarray]:
    """The two kernels as float32 numpy arrays: `[8, H]` and `[H]`."""
    inner = params["params"]
    return (
        np.asarray(inner["hidden"]["kernel"], np.float32),
        np.asarray(inner["out"]["kernel"], np.float32)[:, 0],
    )


def from_weights(hidden: np.ndarray, out: np.ndarray) -> MetaParams:
    """LPONetwork parameters from the two kernels (`[8, H]`, `[H]`)."""
    return {
        "params": {
            "hidden": {"kernel": jnp.asarray(hidden, jnp.float32)},
            "out": {"kernel": jnp.asarray(out, jnp.float32)[:, None]},
        }
    }


def make_meta_train(
    config: PPOConfig,
    meta_drift: Callable[[MetaParams, jax.Array, jax.Array, float], jax.Array] = lpo_drift,
) -> Callable[[jax.Array, MetaParams], TrainResult]:
    """`train(rng, meta_params) -> TrainResult`: PPO with `meta_drift(meta_params, ...)`.

    vmap it over seeds and over population members (the meta-parameters' leading axis) and jit
    it: one compiled program per environment for a whole population.
    """

    def train(rng: jax.Array, meta_params: MetaParams) -> TrainResult:
        drift: DriftFn = functools.partial(meta_drift, meta_params)
        return make_train(config, Components(drift=drift))(rng)

    return train


class DriftGrid(NamedTuple):
    """Flat arrays of (ratio, advantage) points."""

    ratio: jax.Array
    advantage: jax.Array


class DriftSamples(NamedTuple):
    """A drift's values and slope d drift / d ratio at the points of a grid."""

    ratio: np.ndarray
    advantage: np.ndarray
    value: np.ndarray
    slope: np.ndarray


def drift_grid(points: int = 128) -> DriftGrid:
    """The distillation grid: `points` advantages in [-8, 8) times `points` ratios in
    [e^-2, e^2) (uniform in log r), flattened."""
    advantage = np.linspace(-8.0, 8.0, points, endpoint=False, dtype=np.float32)
    ratio = np.exp(np.linspace(-2.0, 2.0, points, endpoint=False, dtype=np.float32))
    r, a = np.meshgrid(ratio, advantage, indexing="ij")
    return DriftGrid(jnp.asarray(r.ravel()), jnp.asarray(a.ravel()))


def sample_drift(drift: DriftFn, grid: DriftGrid, epsilon: float = 0.2) -> DriftSamples:
    """`drift` and d drift / d ratio at every grid point (one jitted vmap over the grid).

    Args:
        drift: a drift function `drift(ratio, advantage, epsilon)` of scalars.
        grid: the points.
        epsilon: the clip range passed to the drift.

    Returns:
        The samples as float32 numpy arrays.
    """

    def one(ratio, advantage):
        return jax.value_and_grad(lambda r: drift(r, advantage, epsilon))(ratio)

    value, slope = jax.jit(jax.vmap(one))(grid.ratio, grid.advantage)
    return DriftSamples(
        np.asarray(grid.ratio, np.float32),
        np.asarray(grid.advantage, np.float32),
        np.asarray(value, np.float32),
        np.asarray(slope, np.float32),
    )
