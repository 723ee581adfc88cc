"""Training seeds: drawn where no candidate can know them, shared by a batch, recorded.

Why: every evaluation used to train with seeds `0..seeds-1`, so the agent's initial weights
(and every environment reset) were known before a candidate was written. An optimizer rule that
recognised individual weights by their initial values and wrote a fixed controller into them
learned nothing and scored about 2.5x Adam, confirmed on more of the same seeds. A score must be
unpredictable before evaluation and reproducible after it, so:

- **Drawn, not fixed.** Each evaluator owns a secret *pool* of seeds drawn from the operating
  system's randomness (`secrets`) in the trusted parent; each batch trains on `count` of them
  drawn from the pool (again with `secrets`). The pool never reaches a prompt, a log line, a
  tracer or a candidate; a run keeps its pool in its private state so a resumed run trains on
  the same pool (and reuses the baselines it already has).
- **Paired.** A batch's candidates and its baseline program train on the same seeds in the
  same layout (one program vmapped over the batch's seeds, in order), so the normalised score
  compares like with like and the baseline program scores exactly 1.0 against itself.
  Baselines are cached per (config, layout, seed) (evaluation/baseline_cache.py): a seed's
  returns depend on the layout it was trained in (measured: seed 11's CartPole return at 1e5
  steps was 269.42 alone and 293.19 beside seed 22, though bit-identical at 16,384 steps), so
  pairing a candidate with a baseline from another layout gave the PPO-clip seed 1.052 against
  itself. Drawn seeds are sorted, so a set drawn again reuses its baseline.
- **Fresh for confirmations.** A confirmation (an elite re-evaluated on more seeds) draws
  seeds the candidate has not been trained on (`exclude`).
- **Recorded.** Every score records the seed values it was trained on (`EnvScore.seeds`, the
  archive's `evaluations.seeds`), so `metarl evaluate FILE --seed-values ...` re-runs it.
- **Pinned on request.** `--seed-values 0,1,2,3` fixes them (reproducing a paper, debugging);
  the choice is recorded (`TrainingSeeds.pinned`, the run's config) and changes the
  evaluation key, so pinned and drawn scores are never silently shared.

Cost, measured on the 2-core CPU for the demo (`benchmarks/seeds.py`): see benchmarks/RESULTS.md.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Iterable, Sequence

from metarl.errors import USAGE, MetarlError

SEED_LIMIT = 2**31  # seed values are drawn from [0, SEED_LIMIT)
POOL_FACTOR = 2  # a pool holds at least this many times the largest count drawn from it


class SeedError(MetarlError, ValueError):
    """Seed values that cannot be used (a malformed `--seed-values`, an exhausted pool)."""

    exit_code = USAGE


@dataclass(frozen=True)
class TrainingSeeds:
    """The training seeds one batch is trained on.

    Attributes:
        values: the seed values, in the order the trainer vmaps them.
        pinned: True when the user fixed them (`--seed-values`), False when they were drawn.
    """

    values: tuple[int, ...]
    pinned: bool = False

    def __post_init__(self) -> None:
        check_values(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def as_list(self) -> list[int]:
        return list(self.values)


def check_values(values: Sequence[int]) -> None:
    """Refuse seed values a trainer cannot use.

    Raises:
        SeedError: empty, repeated, not integers, or outside [0, 2^31).
    """
    if not values:
        raise SeedError("at least one training seed is needed")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise SeedError(f"seed values must be integers, got {list(values)}")
    if any(not 0 <= v < SEED_LIMIT for v in values):
        raise SeedError(f"seed values must be in [0, {SEED_LIMIT}), got {list(values)}")
    if len(set(values)) != len(values):
        raise SeedError(f"seed values must be distinct, got {list(values)}")


def parse_seed_values(text: str | Sequence[int] | None) -> list[int] | None:
    """`"0,1,2,3"` (or a list of ints, as a TOML file gives it) -> [0, 1, 2, 3]; None -> None.

    Raises:
        SeedError: the text is not a comma-separated list of distinct integers in [0, 2^31).
    """
    if text is None:
        return None
    if isinstance(text, str):
        parts = [p.strip() for p in text.split(",") if p.strip()]
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise SeedError(
                f"seed values must be integers, comma-separated (e.g. 0,1,2,3); got {text!r}"
            ) from None
    else:
        values = list(text)
    check_values(values)
    return values


def draw_pool(size: int) -> tuple[int, ...]:
    """`size` distinct seed values from the operating system's randomness."""
    pool: list[int] = []
    seen: set[int] = set()
    while len(pool) < size:
        value = secrets.randbelow(SEED_LIMIT)
        if value not in seen:
            seen.add(value)
            pool.append(value)
    return tuple(pool)


def pinned_extension(pinned: Sequence[int], count: int, exclude: Iterable[int]) -> list[int]:
    """`count` deterministic values for a pinned evaluator asked for seeds outside `exclude`:
    the pinned values first, then the integers after the largest pinned value."""
    excluded = set(exclude)
    out = [v for v in pinned if v not in excluded][:count]
    candidate = max(pinned) + 1
    while len(out) < count:
        if candidate not in excluded and candidate not in out:
            out.append(candidate)
        candidate += 1
    return out


def pool_size(*counts: int) -> int:
    """The size of a pool that batches of `counts` seeds each are drawn from (a run's child
    batches and its confirmations).

    Small, so that its baselines are soon all cached (a baseline is trained once per seed of
    the pool); at least twice the largest count, so that consecutive batches rarely share
    their whole set; at least their sum, so that a confirmation finds as many seeds as it
    needs that the candidate was not trained on.
    """
    counts = tuple(max(1, int(c)) for c in counts) or (1,)
    return max(POOL_FACTOR * max(counts), sum(counts))


class SeedSource:
    """Where an evaluator's training seeds come from: pinned values, or a secret pool.

    Args:
        count: how many seeds a batch trains on by default.
        pinned: fixed values (`--seed-values`); every batch trains on them.
        pool: the secret pool to draw from (a run's, kept in its state; see `pool_size`);
            None: drawn here, `pool_size(count)` values.
    """

    def __init__(
        self,
        count: int,
        pinned: Sequence[int] | None = None,
        pool: Sequence[int] | None = None,
    ):
        self.count = int(count)
        self.pinned = tuple(pinned) if pinned else None
        if self.pinned is not None:
            check_values(self.pinned)
            self.count = len(self.pinned)
        self.pool = tuple(pool) if pool else draw_pool(pool_size(self.count))
        check_values(self.pool)
        self._random = secrets.SystemRandom()

    def draw(self, count: int | None = None, exclude: Iterable[int] = ()) -> TrainingSeeds:
        """The seeds of one batch: `count` (default: the source's) values not in `exclude`.

        Pinned sources return their values (extended deterministically past the largest when
        `exclude` or a larger `count` asks for others); pool sources draw without replacement
        from the pool's values not in `exclude`.

        Raises:
            SeedError: the pool has fewer than `count` values outside `exclude`.
        """
        count = self.count if count is None else int(count)
        excluded = set(exclude)
        if self.pinned is not None:
            if count == len(self.pinned) and not excluded.intersection(self.pinned):
                return TrainingSeeds(self.pinned, pinned=True)
            return TrainingSeeds(tuple(pinned_extension(self.pinned, count, excluded)), pinned=True)
        available = [v for v in self.pool if v not in excluded]
        if len(available) < count:
            raise SeedError(
                f"the seed pool has {len(available)} unused values; {count} were asked for"
            )
        # sorted: a batch's baseline is cached per layout (the seeds in order), so the same
        # set drawn twice reuses it
        return TrainingSeeds(tuple(sorted(self._random.sample(available, count))), pinned=False)
