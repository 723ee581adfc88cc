"""An LPG run's curriculum as plain data: the levels it trained on in each generation and its
level buffer after it, named by its suite's distribution. Kept out of story.py, which only calls
`curriculum_of`, because it is one method's data and the curriculum plot (curriculum.py) needs
nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from metarl.errors import MetarlError
from metarl.rl.environments.distributions import EnvDistribution
from metarl.rl.suites import get_suite


@dataclass
class BufferLevel:
    """One level of a curriculum's buffer after a generation (the top by score)."""

    seed: int
    name: str  # its environment name, e.g. Grid-small:level=17
    score: float | None  # GROOVE: regret; PLR: the reference's positive value loss
    staleness: int  # levels drawn since it was last drawn or inserted
    drawn: bool  # drawn (trained on) this generation


@dataclass
class DrawnLevel:
    """One level trained on in a generation (by an antithetic pair of members)."""

    seed: int
    name: str
    lifetime: int | None  # agent updates
    pair_return: float | None  # the pair's mean return
    regret: float | None  # the reference's return minus the pair's; None: not measured


@dataclass
class CurriculumGeneration:
    """What an LPG run's curriculum did in one generation (`state.history`)."""

    generation: int
    replay: bool  # the levels were replayed from the buffer, else freshly sampled
    drawn: list[DrawnLevel]
    buffer: list[BufferLevel]  # the buffer after the generation, top by score (a snapshot)
    buffer_size: int  # levels in the whole buffer


def distribution_of(suite: str) -> EnvDistribution | None:
    """The distribution a suite draws its levels from (what names a curriculum's seeds);
    None for a suite without one, or one this metarl does not know (an older archive's)."""
    try:
        return get_suite(suite).distribution
    except MetarlError:
        return None


def level_name(distribution: EnvDistribution | None, seed: int) -> str:
    """Level `seed`'s environment name, e.g. `Grid-small:level=17` (`level=17` without a
    distribution)."""
    try:
        return distribution.env(seed) if distribution is not None else f"level={seed}"
    except ValueError:
        return f"level={seed}"


def _at(values, index: int):
    """values[index], or None when `values` is not a list that long."""
    return values[index] if isinstance(values, list) and index < len(values) else None


def curriculum_of(
    history: list[dict], distribution: EnvDistribution | None
) -> list[CurriculumGeneration]:
    """An LPG run's curriculum per generation, from its ES history.

    Args:
        history: `state.history`, one dict per generation; an LPG run's entries carry
            `replay`, `levels`, `lifetimes`, `returns`, `regret`, `buffer` ([seed, score,
            staleness], top by score) and `buffer_size` (blackbox/lpg_es.py).
        distribution: what names the levels (`distribution_of` the run's suite).

    Returns:
        One CurriculumGeneration per entry with a `buffer`, in order; [] when no entry has a
        buffered level (another method, a uniform curriculum, an older archive).
    """
    out = []
    for entry in history:
        buffer = entry.get("buffer")
        if not isinstance(buffer, list):
            continue
        seeds = [int(s) for s in entry.get("levels") or []]
        drawn = [
            DrawnLevel(
                seed=seed,
                name=level_name(distribution, seed),
                lifetime=_at(entry.get("lifetimes"), i),
                pair_return=_at(entry.get("returns"), i),
                regret=_at(entry.get("regret"), i),
            )
            for i, seed in enumerate(seeds)
        ]
        out.append(
            CurriculumGeneration(
                generation=int(entry.get("generation", len(out) + 1)),
                replay=bool(entry.get("replay")),
                drawn=drawn,
                buffer=[
                    BufferLevel(
                        seed=int(seed),
                        name=level_name(distribution, int(seed)),
                        score=score,
                        staleness=int(staleness),
                        drawn=int(seed) in seeds,
                    )
                    for seed, score, staleness in buffer
                ],
                buffer_size=int(entry.get("buffer_size") or len(buffer)),
            )
        )
    return out if any(g.buffer for g in out) else []
