"""Environment distributions: a suite whose environments are *drawn*, not listed.

A distribution turns an integer seed into an environment name, deterministically: a random
grid level (`Grid-small:level=17`, levels.py) or a gymnax environment at sampled parameters
(`CartPole-v1:length=0.731+masspole=0.212+...`, a variant, registry.py). Because a level
is named by its seed, every consumer shares one representation: a curriculum's buffer holds
seeds (curriculum.py), the ES turns them into level pytrees, discovery into env names, and
the archive records names that re-create the same environment anywhere.

Roles come from disjoint seed ranges: a suite's fixed train draws use seeds 0.., validation
draws 1_000_000.., test draws 2_000_000..; curricula draw fresh seeds uniformly below 2**31
(curriculum.py), which can meet a validation seed with probability ~1e-9 per draw.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

VALIDATION_SEEDS = 1_000_000
TEST_SEEDS = 2_000_000


class ParameterRange(NamedTuple):
    field: str
    low: float
    high: float


class EnvDistribution(NamedTuple):
    """Environments drawn by seed.

    Attributes:
        name: the distribution's name (its suite's vocabulary).
        base: a grid distribution (`Grid-small`, `Grid-all`) or a gymnax environment.
        ranges: for a gymnax base, the parameters drawn uniformly per seed.
        lifetimes: for grid levels, the (shortest, longest) agent lifetime in updates of the
            LPG task drawn with each level (log-uniform; TA-LPG).
    """

    name: str
    base: str
    ranges: tuple[ParameterRange, ...] = ()
    lifetimes: tuple[int, int] | None = None

    @property
    def grid(self) -> bool:
        return self.base.startswith("Grid-")

    def env(self, seed: int) -> str:
        """The environment name of draw `seed` (the same seed, the same environment).

        Args:
            seed: a non-negative integer.

        Returns:
            A grid level name or a gymnax variant name.
        """
        seed = int(seed)
        if seed < 0:
            raise ValueError(f"a draw's seed is non-negative, not {seed}")
        if self.grid:
            return f"{self.base}:level={seed}"
        values = parameter_values(self, seed)
        return self.base + ":" + "+".join(f"{k}={v:.4g}" for k, v in values.items())

    def draws(self, first: int, count: int) -> tuple[str, ...]:
        """`count` environments, seeds first .. first+count-1."""
        return tuple(self.env(first + i) for i in range(count))


def parameter_values(distribution: EnvDistribution, seed: int) -> dict[str, float]:
    """The parameters of draw `seed`: each range uniform (numpy's PCG64 seeded with `seed`),
    plus the fields gymnax derives from them (CartPole's total_mass and polemass_length).

    Returns:
        field -> value, in the order of `distribution.ranges` then derived fields.
    """
    rng = np.random.default_rng(seed)
    values = {r.field: float(np.round(rng.uniform(r.low, r.high), 4)) for r in distribution.ranges}
    if distribution.base.startswith("CartPole"):
        masscart = values.get("masscart", 1.0)
        masspole = values.get("masspole", 0.1)
        length = values.get("length", 0.5)
        values["total_mass"] = round(masscart + masspole, 6)
        values["polemass_length"] = round(masspole * length, 6)
    return values


DISTRIBUTIONS: dict[str, EnvDistribution] = {
    d.name: d
    for d in (
        # GROOVE's grid distributions with its log-uniform lifetimes ("all_vrandlife": 10 to
        # 250 updates)
        EnvDistribution("grid-small", "Grid-small", lifetimes=(10, 250)),
        EnvDistribution("grid-random", "Grid-all", lifetimes=(10, 250)),
        # CartPole's pole, masses, gravity and push: the classic task as a family
        EnvDistribution(
            "cartpole-params",
            "CartPole-v1",
            ranges=(
                ParameterRange("length", 0.25, 1.0),
                ParameterRange("masspole", 0.05, 0.5),
                ParameterRange("masscart", 0.5, 2.0),
                ParameterRange("gravity", 7.0, 13.0),
                ParameterRange("force_mag", 5.0, 15.0),
            ),
        ),
    )
}
