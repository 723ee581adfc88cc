"""A task's building blocks: the terms its programs are made of, as mutation material.

The symbolic layer writes a drift as f(log r, r - 1, A) (symbolic/source.py): the quantities
that trust regions in the literature are built from. The offline proposer's edits change one
constant, function or operator, and its `insert` only recombines what the program already holds,
so a run seeded with PPO-clip (which never takes log r) cannot reach an objective in log r
except by chance. Building blocks make those terms reachable, in two ways that keep a task's
contract by construction where the terms allow it:

- **swap**: an occurrence of one term of a group is replaced by another of the same group
  (log r <-> r - 1 <-> 1 - 1/r: all zero at r = 1 with slope 1, so a drift built on one keeps
  its value and slope at r = 1 on another; A <-> tanh(A) <-> clip(A, -3, 3); an optimizer's
  grad <-> one of its momenta).
- **add**: the program's output gains `coefficient * term` for a term that is itself within
  the contract (a drift penalty that is >= 0 and zero with a zero slope at r = 1, such as the
  KL estimator r - 1 - log r; an optimizer update term such as weight decay, -lr * param).

Terms are written with the contract's argument names (`ratio`, `advantage`, ...); the proposer
renames them to a candidate's own argument names by position.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from metarl.tasks.families import Param


@dataclass(frozen=True)
class BuildingBlocks:
    """The terms of one task.

    Attributes:
        swaps: groups of interchangeable terms (source expressions over the contract's
            arguments); an occurrence of one may be replaced by another of its group.
        additions: terms that may be added to the output, times a coefficient drawn
            log-uniformly in `coefficient`; each keeps the contract when added to a program
            that keeps it.
        output: which element of a returned tuple is the output (None: the returned value).
        coefficient: (low, high) of an addition's coefficient.
    """

    swaps: tuple[tuple[str, ...], ...]
    additions: tuple[str, ...]
    output: int | None = None
    coefficient: tuple[float, float] = (0.01, 1.0)

    def __post_init__(self):
        if any(len(group) < 2 for group in self.swaps):
            raise ValueError("a swap group needs at least two terms")
        low, high = self.coefficient
        if not 0 < low <= high:
            raise ValueError(f"coefficient range {self.coefficient} is not 0 < low <= high")

    def draw_coefficient(self, rng: random.Random) -> float:
        """An addition's coefficient, log-uniform in `coefficient`, to 3 significant digits."""
        return Param("coefficient", *self.coefficient).draw(rng)


def signature_arguments(signature: str) -> tuple[str, ...]:
    """The argument names of a task's signature ("drift(ratio, advantage, epsilon) -> array"
    -> ("ratio", "advantage", "epsilon")): the names building blocks are written with."""
    inside = signature.split("(", 1)[1].split(")", 1)[0]
    return tuple(part.strip() for part in inside.split(",") if part.strip())
