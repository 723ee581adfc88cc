"""Parametric program families: whole regions of a task's program space, from the literature.

The offline proposer's edits (discovery/proposers/mutation.py) move a program by one constant,
function or operator at a time, so a run seeded with PPO-clip and LPO explores their close
neighbourhoods. A family is a program with named parameters (an asymmetric clip range, a KL
coefficient, DPO's alpha and beta, Adam's or Lion's betas); drawing one at random parameters
is a jump to another region that still keeps the task's contract (every member of a drift
family is >= 0 with zero value and slope at ratio 1; every optimizer family keeps its state in
the task's slots). Once a member is archived, the `constant` edit explores its parameters.
"""

from __future__ import annotations

import math
import random
import string
from dataclasses import dataclass


def round_sig(value: float, digits: int = 3) -> float:
    """`value` to `digits` significant digits (a readable literal in a program)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - int(math.floor(math.log10(abs(value)))))


@dataclass(frozen=True)
class Param:
    """One parameter of a family: drawn uniformly in [low, high], or log-uniformly (`log`)."""

    name: str
    low: float
    high: float
    log: bool = True

    def draw(self, rng: random.Random) -> float:
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return round_sig(value)


@dataclass(frozen=True)
class ProgramFamily:
    """A program template with `$name` placeholders, one per parameter.

    Attributes:
        name: short name, used in proposal names and descriptions.
        template: the program's source; `$name` stands for a parameter's value.
        params: the parameters and their ranges.
        reference: where the family comes from (one line).
    """

    name: str
    template: str
    params: tuple[Param, ...]
    reference: str

    def render(self, values: dict[str, float]) -> str:
        """The program at `values` (every parameter named).

        Raises:
            KeyError: a parameter without a value.
        """
        return string.Template(self.template).substitute({k: repr(v) for k, v in values.items()})

    def draw(self, rng: random.Random) -> tuple[str, dict[str, float]]:
        """A member at random parameters: (its source, the values)."""
        values = {param.name: param.draw(rng) for param in self.params}
        return self.render(values), values

    def describe(self, values: dict[str, float]) -> str:
        """`name(a=1.0, b=2.0)`: what a proposal built from this family says it is."""
        inner = ", ".join(f"{k}={v!r}" for k, v in values.items())
        return f"{self.name}({inner})"
