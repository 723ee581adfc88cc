"""Level samplers for curricula: uniform, Prioritized Level Replay (PLR) and GROOVE.

Why: an algorithm meta-learned on levels drawn uniformly spends most of its budget on levels
that teach it nothing (already solved, or hopeless). PLR (Jiang et al. 2021, "Prioritized
Level Replay") keeps a buffer of levels seen so far with a learning-potential score and replays
high-scoring, long-unseen ones; GROOVE (Jackson et al. 2023, "Discovering General Reinforcement
Learning Algorithms with Adversarial Environment Design") uses the same sampler with a
different score, the *algorithmic regret* of the learned algorithm against a reference one.
The sampler is therefore one class; `kind` only says whether it replays at all (`uniform`
never does) and names the score the caller is expected to feed back.

A level is identified by an integer seed (the level itself is `distribution.sample(
PRNGKey(seed))` elsewhere), so this module never needs to know what a level is: the buffer is
plain numpy, JSON-serialisable for resumable runs, and used host-side once per generation by
the evolution-strategy loop and the LLM discovery loop. All randomness comes from a
`numpy.random.Generator` the caller passes in, so a run with a fixed seed is reproducible.

Non-finite scores (a diverged run) are treated as -inf: such a level is never inserted, and a
buffered level that receives one is evicted, so it is never prioritised and the buffer stays
strict JSON.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np

from metarl.errors import USAGE, MetarlError

CURRICULA = ("uniform", "plr", "groove")
SEED_BOUND = 2**31 - 1  # new level seeds are drawn from [0, SEED_BOUND)


class CurriculumError(MetarlError, ValueError):
    """A bad curriculum setting, a malformed saved state, or scores that do not fit a draw."""

    exit_code = USAGE


@dataclass(frozen=True)
class CurriculumConfig:
    """How levels are chosen.

    Attributes:
        kind: one of CURRICULA.
        capacity: how many levels the replay buffer holds.
        replay_prob: the probability that a batch is replayed (once the buffer is filled enough).
        staleness_coeff: the staleness weight's share of the replay distribution.
        temperature: the rank prioritisation's temperature (lower: sharper).
        minimum_fill: the fraction of capacity filled before any replay.
    """

    kind: str = "uniform"
    capacity: int = 256
    replay_prob: float = 0.5
    staleness_coeff: float = 0.3
    temperature: float = 1.0
    minimum_fill: float = 0.5

    def validate(self) -> CurriculumConfig:
        """Check every field; returns self, so construction and checking chain.

        Raises:
            CurriculumError: on the first bad field, with a one-line message.
        """
        if self.kind not in CURRICULA:
            raise CurriculumError(f"unknown curriculum {self.kind!r}; expected one of {CURRICULA}")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int):
            raise CurriculumError(f"capacity must be an integer, got {self.capacity!r}")
        if self.capacity < 1:
            raise CurriculumError(f"capacity must be at least 1, got {self.capacity}")
        for name in ("replay_prob", "staleness_coeff", "minimum_fill"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise CurriculumError(f"{name} must be in [0, 1], got {value!r}")
        if not (math.isfinite(self.temperature) and self.temperature > 0.0):
            raise CurriculumError(f"temperature must be positive, got {self.temperature!r}")
        return self


class LevelEntry(NamedTuple):
    """One buffered level, for reports."""

    seed: int
    score: float
    staleness: int  # levels drawn since it was last sampled or inserted


@dataclass
class LevelBuffer:
    """The replay buffer: the first `size` entries of each array are filled, the rest are zero.

    Attributes:
        seeds: int64[capacity], the levels' seeds.
        scores: float64[capacity], their latest scores (always finite).
        last_sampled: int64[capacity], the clock when each was last sampled or inserted.
        size: how many entries are filled.
        clock: how many levels have been drawn, replayed or new.
    """

    seeds: np.ndarray
    scores: np.ndarray
    last_sampled: np.ndarray
    size: int = 0
    clock: int = 0

    @property
    def capacity(self) -> int:
        """How many entries the buffer holds when full."""
        return int(self.seeds.shape[0])

    @classmethod
    def empty(cls, capacity: int) -> LevelBuffer:
        """An empty buffer of `capacity` entries, with the clock at 0."""
        zeros = np.zeros(capacity, dtype=np.int64)
        return cls(zeros.copy(), np.zeros(capacity, dtype=np.float64), zeros.copy())

    def entries(self) -> list[LevelEntry]:
        """The filled entries in buffer order."""
        return [
            LevelEntry(int(seed), float(score), self.clock - int(last))
            for seed, score, last in zip(
                self.seeds[: self.size], self.scores[: self.size], self.last_sampled[: self.size]
            )
        ]

    def to_dict(self) -> dict[str, Any]:
        """The buffer as plain ints, floats and lists (exact through JSON)."""
        return {
            "seeds": self.seeds.tolist(),
            "scores": self.scores.tolist(),
            "last_sampled": self.last_sampled.tolist(),
            "size": self.size,
            "clock": self.clock,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelBuffer:
        """The buffer `to_dict` saved (possibly through JSON).

        Raises:
            CurriculumError: if a field is missing or inconsistent.
        """
        try:
            buffer = cls(
                np.asarray(data["seeds"], dtype=np.int64),
                np.asarray(data["scores"], dtype=np.float64),
                np.asarray(data["last_sampled"], dtype=np.int64),
                int(data["size"]),
                int(data["clock"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise CurriculumError(f"malformed level buffer: {error}") from None
        shapes = {buffer.seeds.shape, buffer.scores.shape, buffer.last_sampled.shape}
        if len(shapes) != 1 or buffer.seeds.ndim != 1 or not 0 <= buffer.size <= buffer.capacity:
            raise CurriculumError("malformed level buffer: array lengths or size disagree")
        return buffer


def score_weights(buffer: LevelBuffer, temperature: float) -> np.ndarray:
    """PLR's rank prioritisation over the filled entries.

    h_i = (1 / rank_i) ** (1 / temperature), rank 1 = the highest score, ties broken by buffer
    index (the earlier entry ranks higher), normalised to sum to 1.

    Args:
        buffer: the buffer.
        temperature: positive; lower concentrates the weight on the top ranks.

    Returns:
        float64[capacity]; unfilled entries weigh 0 (all zero when the buffer is empty).
    """
    weights = np.zeros(buffer.capacity, dtype=np.float64)
    if buffer.size == 0:
        return weights
    order = np.argsort(-buffer.scores[: buffer.size], kind="stable")
    ranks = np.empty(buffer.size, dtype=np.float64)
    ranks[order] = np.arange(1, buffer.size + 1)
    h = (1.0 / ranks) ** (1.0 / temperature)
    weights[: buffer.size] = h / h.sum()
    return weights


def staleness_weights(buffer: LevelBuffer) -> np.ndarray:
    """PLR's staleness prioritisation: levels unseen for longer weigh more.

    Args:
        buffer: the buffer.

    Returns:
        float64[capacity], (clock - last_sampled_i) normalised over the filled entries, uniform
        over them if every staleness is 0; unfilled entries weigh 0.
    """
    weights = np.zeros(buffer.capacity, dtype=np.float64)
    if buffer.size == 0:
        return weights
    staleness = (buffer.clock - buffer.last_sampled[: buffer.size]).astype(np.float64)
    total = staleness.sum()
    weights[: buffer.size] = staleness / total if total > 0 else 1.0 / buffer.size
    return weights


def replay_weights(buffer: LevelBuffer, config: CurriculumConfig) -> np.ndarray:
    """The replay distribution: (1 - staleness_coeff) * score + staleness_coeff * staleness.

    Returns:
        float64[capacity], summing to 1 over the filled entries (all zero when empty).
    """
    rho = config.staleness_coeff
    return (1.0 - rho) * score_weights(buffer, config.temperature) + rho * staleness_weights(buffer)


class Draw(NamedTuple):
    """A batch of levels to evaluate on: all replayed from the buffer, or all new."""

    seeds: tuple[int, ...]
    replay: bool
    indices: tuple[int, ...]  # buffer indices when replayed, else empty


def _remove(buffer: LevelBuffer, indices: Sequence[int]) -> None:
    """Drop the filled entries at `indices` from `buffer` (in place), keeping the others in
    order and zeroing the freed tail."""
    keep = np.ones(buffer.size, dtype=bool)
    keep[list(indices)] = False
    kept = int(keep.sum())
    for array in (buffer.seeds, buffer.scores, buffer.last_sampled):
        array[:kept] = array[: buffer.size][keep]
        array[kept:] = 0
    buffer.size = kept


def _insert(buffer: LevelBuffer, seed: int, score: float) -> None:
    """Add a new level's score to `buffer` (in place).

    A buffered seed takes the new score (or is evicted if it is non-finite). A new seed with a
    non-finite score is dropped; otherwise it is appended while the buffer is not full, and then
    replaces the lowest-scoring entry (the first of equals) only if it scores strictly higher.
    """
    (found,) = np.nonzero(buffer.seeds[: buffer.size] == seed)
    if found.size:
        if math.isfinite(score):
            buffer.scores[found[0]] = score
            buffer.last_sampled[found[0]] = buffer.clock
        else:
            _remove(buffer, found[:1].tolist())
        return
    if not math.isfinite(score):
        return
    if buffer.size < buffer.capacity:
        slot = buffer.size
        buffer.size += 1
    else:
        slot = int(np.argmin(buffer.scores))
        if not score > buffer.scores[slot]:
            return
    buffer.seeds[slot] = seed
    buffer.scores[slot] = score
    buffer.last_sampled[slot] = buffer.clock


def _rescore(buffer: LevelBuffer, indices: Sequence[int], scores: np.ndarray) -> None:
    """Give the replayed entries at `indices` their new `scores` (in place).

    An index given more than once (`draw` never repeats one; a hand-made draw may) takes the
    mean of its scores;
    an entry whose new score is non-finite is evicted.
    """
    evicted = []
    for index in sorted(set(indices)):
        score = float(np.mean([s for i, s in zip(indices, scores) if i == index]))
        if math.isfinite(score):
            buffer.scores[index] = score
        else:
            evicted.append(index)
    if evicted:
        _remove(buffer, evicted)


class Curriculum:
    """A level sampler: `draw` a batch, evaluate on it, `update` with the scores.

    Attributes:
        config: the validated settings.
        buffer: the replay buffer (changed in place by `draw` and `update`).
    """

    def __init__(self, config: CurriculumConfig, buffer: LevelBuffer | None = None):
        """Args:
        config: the settings; validated here.
        buffer: a saved buffer to resume from; None starts empty.

        Raises:
            CurriculumError: on a bad config or a buffer of another capacity.
        """
        self.config = config.validate()
        self.buffer = LevelBuffer.empty(config.capacity) if buffer is None else buffer
        if self.buffer.capacity != config.capacity:
            raise CurriculumError(
                f"buffer capacity {self.buffer.capacity} != config capacity {config.capacity}"
            )

    def can_replay(self) -> bool:
        """Whether the buffer is filled enough for a batch to be replayed."""
        filled = self.buffer.size >= self.config.minimum_fill * self.config.capacity
        return self.config.kind != "uniform" and self.buffer.size > 0 and filled

    def draw(self, rng: np.random.Generator, n: int) -> Draw:
        """The next batch of n levels; advances the clock by n.

        Once `can_replay` and the buffer holds at least n levels, with probability replay_prob
        the batch is n distinct buffer indices sampled without replacement by `replay_weights`
        (a batch trains on n different levels; their last_sampled set to the new clock);
        otherwise it is n fresh seeds from [0, 2**31 - 1).

        Args:
            rng: the source of all randomness.
            n: the batch size, at least 1.

        Returns:
            The draw, to pass back to `update` with its scores.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CurriculumError(f"a draw needs at least 1 level, got {n!r}")
        buffer = self.buffer
        buffer.clock += n
        if self.can_replay() and buffer.size >= n and rng.random() < self.config.replay_prob:
            weights = replay_weights(buffer, self.config)
            indices = rng.choice(buffer.capacity, size=n, replace=False, p=weights)
            buffer.last_sampled[indices] = buffer.clock
            seeds = tuple(int(s) for s in buffer.seeds[indices])
            return Draw(seeds, True, tuple(int(i) for i in indices))
        seeds = rng.integers(0, SEED_BOUND, size=n)
        return Draw(tuple(int(s) for s in seeds), False, ())

    def update(self, draw: Draw, scores: Sequence[float]) -> None:
        """Feed back the scores of the levels of `draw` (the latest draw: indices must hold).

        Replayed entries take their new scores; new levels are inserted (see `_insert`).
        `uniform` keeps no buffer, so it only checks the scores' count.

        Args:
            draw: what `draw` returned.
            scores: one score per level of the draw, higher = more worth replaying.

        Raises:
            CurriculumError: if the counts differ or an index is outside the filled buffer.
        """
        values = np.asarray(scores, dtype=np.float64).reshape(-1)
        if values.size != len(draw.seeds):
            raise CurriculumError(f"{values.size} scores for a draw of {len(draw.seeds)} levels")
        if self.config.kind == "uniform":
            return
        if draw.replay:
            if any(not 0 <= i < self.buffer.size for i in draw.indices):
                raise CurriculumError("a replayed index is outside the filled buffer")
            _rescore(self.buffer, draw.indices, values)
            return
        for seed, score in zip(draw.seeds, values):
            _insert(self.buffer, seed, float(score))

    def to_dict(self) -> dict[str, Any]:
        """The config and buffer as plain JSON data, for a resumable run."""
        return {"config": dataclasses.asdict(self.config), "buffer": self.buffer.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Curriculum:
        """The curriculum `to_dict` saved.

        Raises:
            CurriculumError: if the data is malformed.
        """
        try:
            config = CurriculumConfig(**data["config"])
        except (KeyError, TypeError) as error:
            raise CurriculumError(f"malformed curriculum config: {error}") from None
        return cls(config, LevelBuffer.from_dict(data.get("buffer", {})))


def positive_value_loss(advantages: np.ndarray) -> float:
    """PLR's score (Jiang et al. 2021): the mean of max(A_t, 0) over every step.

    With GAE advantages A_t = sum_k (gamma lambda)^k delta_{t+k}, this is the average positive
    part of the value error: how much better than predicted the agent can still do.

    Args:
        advantages: GAE advantages of any shape (steps x envs, ...), not empty.

    Returns:
        The score (non-finite if an advantage is; `update` then treats it as -inf).
    """
    values = np.asarray(advantages, dtype=np.float64)
    if values.size == 0:
        raise CurriculumError("positive value loss needs at least one advantage")
    return float(np.mean(np.maximum(values, 0.0)))


def algorithmic_regret(reference_return: float, agent_return: float) -> float:
    """GROOVE's score (Jackson et al. 2023): how much a reference algorithm (e.g. tuned PPO)
    beats the learned algorithm on a level: reference_return - agent_return.

    Args:
        reference_return: the reference algorithm's return on the level.
        agent_return: the learned algorithm's return on it.

    Returns:
        The regret; positive where the learned algorithm falls short.
    """
    return float(reference_return) - float(agent_return)


def normalised_regret(scores: Sequence[float]) -> float:
    """Algorithmic regret for normalised scores (1.0 = the reference, 0.0 = a random policy):
    1 - mean(scores), i.e. the mean regret against the reference in those units.

    Args:
        scores: the learned algorithm's normalised scores on a level (e.g. one per seed).

    Returns:
        The regret.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        raise CurriculumError("normalised regret needs at least one score")
    return float(1.0 - np.mean(values))
