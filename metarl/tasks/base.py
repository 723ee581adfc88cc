"""What a task is: one algorithm component that metarl can discover.

A task owns its contract (the text the LLM reads), its seed programs, its probes, and how a
candidate function plugs into the trainer. The loop, the archive and the CLI only ever talk to
tasks through this interface, so adding a task touches nothing but its own folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from metarl.rl.components import SLOT_NAMES, Components
from metarl.rl.meta.names import METHOD_SLOTS
from metarl.rl.verifier.artifact import ElementSignature
from metarl.tasks.building_blocks import BuildingBlocks
from metarl.tasks.probing import ProbeReport

TASKS_ROOT = Path(__file__).resolve().parent


@dataclass(frozen=True)
class SeedProgram:
    name: str
    source: str
    path: Path
    is_baseline: bool  # the seed whose scores define normalised score 1.0


@dataclass(frozen=True)
class Task:
    name: str
    function_name: str
    signature: str  # e.g. "drift(ratio, advantage, epsilon) -> array"
    contract: str  # the full description the proposer reads
    baseline_name: str  # file stem of the seed program that reproduces the baseline algorithm
    # the trainer's slot the candidate fills: a field of rl/components.py's Components
    slot: str
    # plug(candidate_function) -> the trainer's Components with the candidate in its slot;
    # None: the candidate itself is the slot's value
    plug: Callable[[Callable], Components] | None = None
    # probes(candidate_function, rng_seed) -> ProbeReport; runs only inside the sandbox
    probes: Callable[[Callable, int], ProbeReport] | None = None
    # fingerprint_inputs() -> tuple of arrays: a fixed batch on which behaviour is hashed
    fingerprint_inputs: Callable[[], tuple] | None = None
    # How a candidate crosses from the sandboxed tracer to the trainer (rl/verifier/artifact.py):
    # per_element(candidate_function) -> variant name -> per-element function following
    # element_signature; assemble(variant name -> artifact callable) -> a function with the
    # contract's signature, built only from the verified artifact.
    element_signature: ElementSignature | None = None
    per_element: Callable[[Callable], dict[str, Callable]] | None = None
    assemble: Callable[[dict[str, Callable]], Callable] | None = None
    # whether the candidate is a function of (ratio, advantage) that distillation and symbolic
    # regression can sample on a grid (evaluation/tracing.py's sample_drift)
    distillable: bool = False
    # parametric program families (tasks/families.py): regions of the program space the
    # offline proposer may jump to (its `family` operator)
    families: tuple = ()
    # the terms its programs are built from (tasks/building_blocks.py): the offline proposer's
    # `term` operator swaps them and adds them to the output
    building_blocks: BuildingBlocks | None = None

    def __post_init__(self):
        if self.slot not in SLOT_NAMES:
            raise ValueError(
                f"task {self.name!r} fills slot {self.slot!r}; the trainer's slots are "
                f"{', '.join(SLOT_NAMES)}"
            )
        if self.plug is None:
            object.__setattr__(self, "plug", lambda function: Components(**{self.slot: function}))

    @property
    def meta_learners(self) -> tuple[str, ...]:
        """The meta-learners whose training reads this task's slot (rl/meta/names.py)."""
        return tuple(method for method, slots in METHOD_SLOTS.items() if self.slot in slots)

    @property
    def programs_dir(self) -> Path:
        return TASKS_ROOT / self.name / "seed_programs"

    def seed_programs(self) -> list[SeedProgram]:
        """The task's warm starts, one file each in `seed_programs/`, sorted by name."""
        return [
            SeedProgram(p.stem, p.read_text(), p, p.stem == self.baseline_name)
            for p in sorted(self.programs_dir.glob("*.py"))
            if not p.name.startswith("_")
        ]

    def seed_program(self, name: str) -> SeedProgram:
        """The seed program called `name`.

        Raises:
            KeyError: the task has no such program.
        """
        for seed in self.seed_programs():
            if seed.name == name:
                return seed
        known = ", ".join(s.name for s in self.seed_programs())
        raise KeyError(f"task {self.name!r} has no seed {name!r}; seeds: {known}")

    def baseline_program(self) -> SeedProgram:
        """The seed program whose scores define normalised score 1.0."""
        return self.seed_program(self.baseline_name)

    def select(self, functions: Sequence[Callable], index: jax.Array) -> Components:
        """The trainer's Components with `functions[index]` plugged in, for a traced index.

        This is how one compiled program trains a whole batch of candidates (rl/training.py's
        BatchProgram): each call of the program picks its candidate by index.
        """
        return self.plug(switch(functions, index))


def switch(functions: Sequence[Callable], index: jax.Array) -> Callable:
    """A function that calls `functions[index]` (`lax.switch`; `index` may be traced).

    Arguments that are arrays become the switch's operands; Python numbers (the drift's
    `epsilon`) are static and passed to every branch as they are.

    A single function is still called through a conditional, padded with a branch of zeros
    that is never taken: JAX inlines a one-branch switch, and XLA then rounds the function
    fused into the loss differently from the same function in a conditional. Measured: the
    same drift alone and in a batch of two gave fitness 1.180 and 1.051 after 1e5 steps. With
    every batch size compiled alike, a candidate's numbers do not depend on its batch.
    """
    functions = list(functions)

    def call(*args):
        static = {i: a for i, a in enumerate(args) if not isinstance(a, (jax.Array, np.ndarray))}
        operands = [a for i, a in enumerate(args) if i not in static]

        def branch(function: Callable) -> Callable:
            def run(*values):
                values = iter(values)
                return function(
                    *(static[i] if i in static else next(values) for i in range(len(args)))
                )

            return run

        branches = [branch(f) for f in functions]
        if len(branches) == 1:
            shapes = jax.eval_shape(branches[0], *operands)
            branches.append(
                lambda *values: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
            )
        return jax.lax.switch(index, branches, *operands)

    return call
