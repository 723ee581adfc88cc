"""Population mode: islands, parent selection (fitness- and novelty-aware), migration, and the
noise-aware rule for displacing the incumbent.

Everything here is pure and deterministic given a numpy Generator, so that the loop's state
(island membership + the generator's state) is all a resumed run needs to continue exactly.

- Each island keeps at most `capacity` members (archived candidates that passed evaluation).
- A parent is picked by tournament on a combined score: the member's fitness rank within its
  island (0 worst .. 1 best) plus `novelty_weight` x its novelty (mean distance of its program
  to its k nearest island-mates, in [0, 1]). Novelty keeps structurally different programs
  alive even when a few near-copies of the best dominate on fitness.
- Truncation after each generation uses the same combined score, with the island's best by
  fitness always kept (elitism).
- Migration: every `interval` generations, each island's best is copied to the next island
  (ring), if not already there.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np


@dataclass(frozen=True)
class Member:
    id: str
    fitness: float  # what selection sees: confirmed fitness when there is one, else fitness
    tokens: frozenset = field(default_factory=frozenset, compare=False)
    generation: int = 0


def code_tokens(code: str) -> frozenset:
    """A structural fingerprint of a program for novelty: node types with their parent type,
    called functions, operators and (rounded) constants. Comments and names of locals do not
    matter."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return frozenset({code})
    tokens: set = set()
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            tokens.add((type(parent).__name__, type(child).__name__))
        if isinstance(parent, ast.Attribute):
            tokens.add(("attr", parent.attr))
        elif isinstance(parent, ast.Constant) and isinstance(parent.value, (int, float)):
            value = float(parent.value)
            tokens.add(("const", round(value, 2) if math.isfinite(value) else str(value)))
        elif isinstance(parent, (ast.BinOp, ast.UnaryOp)):
            tokens.add(("op", type(parent.op).__name__))
        elif isinstance(parent, ast.Compare):
            tokens.update(("cmp", type(op).__name__) for op in parent.ops)
    return frozenset(tokens)


def distance(a: frozenset, b: frozenset) -> float:
    """Jaccard distance between two token sets."""
    if not a and not b:
        return 0.0
    return 1.0 - len(a & b) / len(a | b)


def novelty(member: Member, others: Iterable[Member], k: int = 3) -> float:
    dists = sorted(distance(member.tokens, o.tokens) for o in others if o.id != member.id)
    if not dists:
        return 1.0
    return float(np.mean(dists[:k]))


def combined_scores(members: Sequence[Member], novelty_weight: float, k: int = 3) -> list[float]:
    """Fitness rank in [0, 1] (ties share their rank) + novelty_weight x novelty."""
    n = len(members)
    if n == 0:
        return []
    fitness = [m.fitness for m in members]
    ranks = []
    for f in fitness:
        below = sum(1 for g in fitness if g < f)
        equal = sum(1 for g in fitness if g == f) - 1
        ranks.append((below + equal / 2) / (n - 1) if n > 1 else 1.0)
    if novelty_weight == 0:
        return ranks
    return [r + novelty_weight * novelty(m, members, k) for r, m in zip(ranks, members)]


def tournament(
    rng: np.random.Generator,
    members: Sequence[Member],
    scores: Sequence[float],
    size: int,
    exclude: Iterable[str] = (),
) -> Member:
    excluded = set(exclude)
    pool = [i for i, m in enumerate(members) if m.id not in excluded] or list(range(len(members)))
    size = max(1, min(size, len(pool)))
    picks = rng.choice(len(pool), size=size, replace=False)
    best = max((pool[int(p)] for p in picks), key=lambda i: (scores[i], -i))
    return members[best]


@dataclass
class Islands:
    """Island membership: lists of candidate ids, in insertion order."""

    members: list[list[str]]
    capacity: int

    @classmethod
    def start(cls, count: int, capacity: int, initial: Sequence[str]) -> "Islands":
        return cls([list(initial) for _ in range(count)], capacity)

    def to_state(self) -> dict:
        return {"members": [list(m) for m in self.members], "capacity": self.capacity}

    @classmethod
    def from_state(cls, state: dict) -> "Islands":
        return cls([list(m) for m in state["members"]], int(state["capacity"]))

    def __len__(self) -> int:
        return len(self.members)

    def add(self, island: int, candidate_id: str) -> None:
        if candidate_id not in self.members[island]:
            self.members[island].append(candidate_id)

    def truncate(self, lookup: dict[str, Member], novelty_weight: float) -> None:
        for i, ids in enumerate(self.members):
            if len(ids) <= self.capacity:
                continue
            members = [lookup[c] for c in ids]
            scores = combined_scores(members, novelty_weight)
            elite = max(range(len(members)), key=lambda j: (members[j].fitness, -j))
            order = sorted(range(len(members)), key=lambda j: (-scores[j], j))
            keep = {elite}
            for j in order:
                if len(keep) >= self.capacity:
                    break
                keep.add(j)
            self.members[i] = [ids[j] for j in sorted(keep)]

    def migrate(self, lookup: dict[str, Member]) -> list[tuple[str, int, int]]:
        """Ring migration of each island's best; returns (id, from, to) moves."""
        if len(self.members) < 2:
            return []
        bests = []
        for ids in self.members:
            if ids:
                bests.append(max(ids, key=lambda c: (lookup[c].fitness, -ids.index(c))))
            else:
                bests.append(None)
        moves = []
        for i, best in enumerate(bests):
            target = (i + 1) % len(self.members)
            if best is not None and best not in self.members[target]:
                self.members[target].append(best)
                moves.append((best, i, target))
        return moves


@dataclass
class SlotPlan:
    island: int
    parent_ids: list[str]
    inspiration_ids: list[str]
    rng_seed: int


def plan_children(
    rng: np.random.Generator,
    islands: Islands,
    lookup: dict[str, Member],
    count: int,
    *,
    crossover_probability: float = 0.2,
    tournament_size: int = 3,
    novelty_weight: float = 0.3,
    inspirations: int = 2,
    first_island: int = 0,
) -> list[SlotPlan]:
    """Parents for `count` children, islands taken in turn starting at `first_island`."""
    plans = []
    for slot in range(count):
        island = (first_island + slot) % len(islands)
        ids = islands.members[island] or [c for m in islands.members for c in m]
        members = [lookup[c] for c in ids]
        scores = combined_scores(members, novelty_weight)
        first = tournament(rng, members, scores, tournament_size)
        parents = [first.id]
        if len(members) > 1 and rng.random() < crossover_probability:
            parents.append(tournament(rng, members, scores, tournament_size, exclude=[first.id]).id)
        ranked = sorted(members, key=lambda m: (-m.fitness, m.id))
        inspo = [m.id for m in ranked if m.id not in parents][:inspirations]
        plans.append(SlotPlan(island, parents, inspo, int(rng.integers(0, 2**31 - 1))))
    return plans


def score_of(fitness: float | None, confirmed: float | None) -> float:
    """The number selection and the incumbent rule compare: confirmed fitness if known."""
    if confirmed is not None:
        return confirmed
    return fitness if fitness is not None else -math.inf


def contenders(
    children: Sequence[tuple[str, float]], incumbent_score: float, limit: int = 1
) -> list[str]:
    """Children (id, fitness) that beat the incumbent on the selection seeds, best first; each
    must be re-evaluated on more seeds before it may displace the incumbent."""
    better = [
        (f, -i, cid) for i, (cid, f) in enumerate(children) if f is not None and f > incumbent_score
    ]
    better.sort(reverse=True)
    return [cid for _, _, cid in better[:limit]]


def rng_from_state(state: dict | None, seed: int) -> np.random.Generator:
    rng = np.random.Generator(np.random.PCG64(seed))
    if state:
        rng.bit_generator.state = state
    return rng


def rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state
