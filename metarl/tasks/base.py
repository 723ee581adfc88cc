"""What a task is: one algorithm component that metarl can discover.

A task owns its contract (the text the LLM reads), its seed programs, its probes, and how a
candidate function plugs into the trainer. The loop, the archive and the CLI only ever talk to
tasks through this interface, so adding a task touches nothing but its own folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from metarl.evaluators.artifact import ElementSignature

SEEDS_ROOT = Path(__file__).resolve().parent.parent / "seeds"


@dataclass(frozen=True)
class Seed:
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
    baseline_seed: str  # file stem of the seed that reproduces the baseline algorithm
    # plug(candidate_function) -> metarl.evaluators.ppo.Components
    plug: Callable[[Callable], Any]
    # probes(candidate_function, rng_seed) -> ProbeReport; runs only inside the sandbox
    probes: Callable[[Callable, int], Any] | None = None
    # fingerprint_inputs() -> tuple of arrays: a fixed batch on which behaviour is hashed
    fingerprint_inputs: Callable[[], tuple] | None = None
    # How a candidate crosses from the sandboxed tracer to the trainer (evaluators/artifact.py):
    # per_element(candidate_function) -> variant name -> per-element function following
    # element_signature; assemble(variant name -> artifact callable) -> a function with the
    # contract's signature, built only from the verified artifact.
    element_signature: ElementSignature | None = None
    per_element: Callable[[Callable], dict[str, Callable]] | None = None
    assemble: Callable[[dict[str, Callable]], Callable] | None = None
    extra: dict = field(default_factory=dict)

    @property
    def seed_dir(self) -> Path:
        return SEEDS_ROOT / self.name

    def seeds(self) -> list[Seed]:
        return [
            Seed(p.stem, p.read_text(), p, p.stem == self.baseline_seed)
            for p in sorted(self.seed_dir.glob("*.py"))
            if not p.name.startswith("_")
        ]

    def seed(self, name: str) -> Seed:
        for seed in self.seeds():
            if seed.name == name:
                return seed
        known = ", ".join(s.name for s in self.seeds())
        raise KeyError(f"task {self.name!r} has no seed {name!r}; seeds: {known}")

    def baseline(self) -> Seed:
        return self.seed(self.baseline_seed)
