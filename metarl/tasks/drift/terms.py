"""The drift's building blocks (tasks/building_blocks.py): the symbolic layer's inputs.

Swaps: the three ratio deviations log r, r - 1 and 1 - 1/r are each zero at r = 1 with slope 1,
so a drift that is zero and flat at r = 1 on one is so on another (LPO's closed form uses r - 1
for positive advantages and log r for negative ones; these swaps reach every mix); A, tanh(A)
and clip(A, -3, 3) change how strongly large advantages act. Additions: penalties that are >= 0
and zero with a zero slope at r = 1 for every advantage, so a drift plus any of them is a drift:
the KL estimator r - 1 - log r (PPO's KL variant), squared log r, an advantage-weighted square,
a square outside the clip range, and a square on log r * A beyond epsilon (it pushes back on
the looser upward trust region that the demo's and the long run's winners shared).
tests/test_building_blocks.py runs the task's probes on every seed program with each addition.
"""

from __future__ import annotations

from metarl.tasks.building_blocks import BuildingBlocks

BLOCKS = BuildingBlocks(
    swaps=(
        ("jnp.log(ratio)", "ratio - 1.0", "1.0 - 1.0 / ratio"),
        ("advantage", "jnp.tanh(advantage)", "jnp.clip(advantage, -3.0, 3.0)"),
    ),
    additions=(
        "ratio - 1.0 - jnp.log(ratio)",
        "jnp.square(jnp.log(ratio))",
        "jnp.square(ratio - 1.0) * jnp.abs(advantage)",
        "jnp.square(jax.nn.relu(jnp.abs(jnp.log(ratio)) - epsilon))",
        "jnp.square(jax.nn.relu(jnp.log(ratio) * advantage - epsilon))",
    ),
    output=None,
    coefficient=(0.01, 1.0),
)
