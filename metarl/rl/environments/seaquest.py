"""Seaquest-MinAtar with gymnax's bullet collisions found per board cell, not per pair.

Why: gymnax 1.0.1's Seaquest steps ~300x slower than its Breakout (`benchmarks/seaquest.py`),
and Seaquest is the `minatar-cpu` protocol's validation game, so every race round waited on it.
Most of its step is `seaquest_helpers.collide_bullets`: four calls per step, each comparing every
row of a 100-row bullet buffer with every row of a 100-row target buffer (a 100 x 100 x 2
position match, then an argmax and a max over it), though at most a handful are alive.

What this is: gymnax's game, unchanged but for how that one helper computes its answer.
`Seaquest` subclasses gymnax's `MinSeaquest`; each of its methods whose code calls
`collide_bullets` is rebuilt from its own code object with that one global name bound to
`collide_per_cell` (nothing of gymnax's is copied or edited, and gymnax's module stays as
shipped: DiscoGen's harness, and anything else in the process, step the original).

Exact, not approximate: gymnax's rule is "each active bullet takes the lowest-numbered active
target on its cell; each target so taken is hit by the highest-numbered bullet that took it; hit
bullets and targets are removed, order kept". `collide_per_cell` computes the same two choices
with one scatter-min over the board's cells and one scatter-max over the targets, so its outputs
equal gymnax's bit for bit wherever the active entities' coordinates lie in gymnax's declared
state space ([-1, 10], a 12 x 12 grid of cells; `tests/test_seaquest.py` checks adversarial
buffers and whole rollouts step by step). Entities outside it (no reachable state has them) are
clipped onto its border cells.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
from gymnax.environments.minatar import seaquest_helpers
from gymnax.environments.minatar.seaquest import MinSeaquest

LOW, HIGH = -1, seaquest_helpers.BOARD_SIZE  # gymnax's state space: coordinates in [-1, 10]
SIDE = HIGH - LOW + 1  # cells per side of the grid the collision looks up


def _cell(entities: jax.Array) -> jax.Array:
    """Each row's board cell (x, y) as one index into the SIDE x SIDE grid."""
    x = jnp.clip(entities[:, 0], LOW, HIGH) - LOW
    y = jnp.clip(entities[:, 1], LOW, HIGH) - LOW
    return x * SIDE + y


def collide_per_cell(
    bullets: jax.Array,
    bullet_count: jax.Array,
    targets: jax.Array,
    target_count: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """gymnax's `collide_bullets`, in O(rows) instead of O(rows^2): the same outputs.

    Args:
        bullets: the bullet buffer (rows x, y, direction, ...); the first `bullet_count` live.
        bullet_count: live bullets.
        targets: the target buffer (rows x, y, ...); the first `target_count` live.
        target_count: live targets.

    Returns:
        (bullets, bullet_count, targets, target_count, reward): both buffers without the rows
        that hit, compacted in order, and the number of targets hit (float32), as gymnax's.
    """
    rows = seaquest_helpers.MAX_ENTITIES
    index = jnp.arange(rows)
    bullet_active = seaquest_helpers.active_mask(bullet_count)
    target_active = seaquest_helpers.active_mask(target_count)
    # the lowest live target on each cell (rows where none: gymnax's argmax found no match)
    lowest = (
        jnp.full(SIDE * SIDE, rows).at[_cell(targets)].min(jnp.where(target_active, index, rows))
    )
    first_target = lowest[_cell(bullets)]
    has_target = bullet_active & (first_target < rows)
    # the highest bullet that took each target (-1: none); rows that took none are dropped
    winner = (
        jnp.full(rows, -1).at[jnp.where(has_target, first_target, rows)].max(index, mode="drop")
    )
    target_hit = winner >= 0
    bullet_hit = has_target & (index == winner[jnp.minimum(first_target, rows - 1)])
    bullets, bullet_count = seaquest_helpers.compact(bullets, bullet_active & ~bullet_hit)
    targets, target_count = seaquest_helpers.compact(targets, target_active & ~target_hit)
    return bullets, bullet_count, targets, target_count, jnp.sum(target_hit, dtype=jnp.float32)


def _rebound(function: types.FunctionType, name: str, value: object) -> types.FunctionType:
    """`function` with the global `name` bound to `value`: its own code, its own closure."""
    namespace = dict(function.__globals__, **{name: value})
    rebound = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__qualname__, rebound.__doc__ = function.__qualname__, function.__doc__
    return rebound


def _methods_calling(cls: type, name: str) -> dict[str, types.FunctionType]:
    """The methods of `cls` whose own code names the global `name`."""
    return {
        attribute: value
        for attribute, value in vars(cls).items()
        if isinstance(value, types.FunctionType) and name in value.__code__.co_names
    }


class Seaquest(MinSeaquest):
    """gymnax's `MinSeaquest` whose bullet collisions are `collide_per_cell` (see the module)."""


_REBOUND = _methods_calling(MinSeaquest, "collide_bullets")
if not _REBOUND:  # gymnax moved the call: this module must follow it, not silently do nothing
    raise ImportError("gymnax's MinSeaquest no longer calls collide_bullets from its methods")
for _attribute, _method in _REBOUND.items():
    setattr(Seaquest, _attribute, _rebound(_method, "collide_bullets", collide_per_cell))
