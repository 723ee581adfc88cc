"""The optimizer's building blocks (tasks/building_blocks.py): OPEN's inputs (Goldie et al.
2024: the gradient, momenta at several timescales, the parameter, training progress).

Swaps: the gradient and the given momenta (decays 0.1 to 0.99; plug.py's MOMENTUM_DECAYS) are
interchangeable signals of where to step, progress and 1 - progress two schedules. Additions to
the update (the first element of the returned tuple): decoupled weight decay (AdamW's
-lr * param), a signed-momentum step (Lion's direction), a bounded ratio of a fast to a slow
momentum, and a signed gradient step that anneals with progress. Each is finite and elementwise
for any input, so the update stays within the contract; tests/test_building_blocks.py runs the
probes.
"""

from __future__ import annotations

from metarl.tasks.building_blocks import BuildingBlocks

BLOCKS = BuildingBlocks(
    swaps=(
        ("grad", "momentum[0]", "momentum[1]", "momentum[2]", "momentum[3]"),
        ("progress", "1.0 - progress"),
    ),
    additions=(
        "-lr * param",
        "-lr * jnp.sign(momentum[2])",
        "-lr * jnp.tanh(momentum[2] / (jnp.abs(momentum[4]) + 1e-8))",
        "-lr * (1.0 - progress) * jnp.sign(grad)",
    ),
    output=0,
    coefficient=(0.01, 1.0),
)
