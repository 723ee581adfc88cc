"""Behaviour near-duplicates: a small descriptor of what a candidate computes, and the distance
that says two candidates behave alike, checked before a candidate is trained.

Why. The cascade already rejects a candidate whose behaviour fingerprint (a hash of its outputs
on the task's fixed probe batch, rounded to 4 significant digits) equals an archived one's. A
hash is all or nothing: `a * b / c` and `a / c * b`, or a formula scaled by (1 + 1e-5), round
differently at a few of the batch's points and hash differently, yet train identically. Training
is the expensive stage (compiles and runs per environment), so a candidate whose outputs on the
probe batch are within a small relative distance of an archived candidate's is stopped after the
probes, as that candidate's duplicate, like an exact one.

The descriptor (`behaviour_descriptor`). The fingerprint batch's outputs (every leaf of the
output pytree, flattened in order) go through a sign-preserving squash, sign(x) log(1 + |x|):
close to the identity for the small values a drift or an update usually takes (so relative
differences there are kept), logarithmic for huge values (so one exploding entry does not
dominate the distance, while 1e6 vs 1.1e6 still differ by 0.7%, far above the threshold). Then
the vector is folded to at most `BEHAVIOUR_SIZE` (64) numbers: kept as is when it has at most 64
entries, else by a count sketch (each entry added, with a fixed pseudo-random sign, into one of
64 buckets picked by a fixed integer hash of its position). Unlike a subsample, the sketch sees
every entry, so a candidate that differs from another on a few points of the batch only does not
look the same; like any linear sketch, it preserves Euclidean distances and norms approximately.
The hash is pure integer arithmetic, so the same outputs give the same descriptor on any machine
and numpy version (archived descriptors stay comparable). Values are kept to 7 significant
digits (float32 precision) to keep archive rows and worker jobs small.

The distance (`behaviour_distance`): the relative L2 (equivalently relative RMS) distance
||a - b|| / max(||a||, ||b||), in [0, 2]; 0 for two zero vectors. A descriptor with a NaN or
an infinity (a candidate that outputs them, or an entry the archive stored as null) never
matches anything: its distance is +inf, and no input makes it raise. A candidate that knows
the threshold can only make itself *more* different to pass it, which is the point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import jax
import numpy as np

BEHAVIOUR_SIZE = 64  # the most numbers a descriptor has
# the most archived descriptors one trainer job carries (the run's latest): 4096 x 64 floats
# is about 3 MB of JSON, and a comparison against all of them takes milliseconds
MAX_KNOWN_BEHAVIOURS = 4096
# how a near-duplicate's reason starts (counted by the discovery loop; read by `is_near`)
NEAR_REASON = "behaves within"
_SIGNIFICANT = 7


@dataclass
class KnownPrograms:
    """What a trainer compares a candidate's behaviour with: the run's exact fingerprints
    (fingerprint -> candidate id) and behaviour descriptors (candidate id -> descriptor)."""

    fingerprints: dict[str, str] = field(default_factory=dict)
    behaviours: dict[str, list] = field(default_factory=dict)


def known_programs(known: Any) -> KnownPrograms:
    """`known` as KnownPrograms: a plain fingerprint dict (older callers) has no descriptors."""
    if isinstance(known, KnownPrograms):
        return known
    return KnownPrograms(fingerprints=dict(known or {}))


def squash(values: np.ndarray) -> np.ndarray:
    """sign(x) log(1 + |x|), elementwise (NaN stays NaN, +-inf stays +-inf)."""
    with np.errstate(all="ignore"):
        return np.sign(values) * np.log1p(np.abs(values))


def _position_hash(size: int) -> np.ndarray:
    """A fixed 32-bit integer hash of positions 0..size-1 (splitmix-style; numpy-version
    independent)."""
    h = np.arange(size, dtype=np.uint64) * np.uint64(0x9E3779B1) + np.uint64(0x7F4A7C15)
    h &= np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    return h


def fold(values: np.ndarray, size: int = BEHAVIOUR_SIZE) -> np.ndarray:
    """`values` when they are at most `size`, else their count sketch into `size` buckets.

    Args:
        values: a 1-d float64 array.
        size: the buckets.

    Returns:
        A 1-d float64 array of min(len(values), size) numbers.
    """
    if values.size <= size:
        return values
    h = _position_hash(values.size)
    buckets = (h % np.uint64(size)).astype(np.int64)
    signs = np.where((h >> np.uint64(31)) & np.uint64(1), -1.0, 1.0)
    with np.errstate(all="ignore"):
        return np.bincount(buckets, weights=signs * values, minlength=size)


def behaviour_descriptor(outputs: Any) -> list[float]:
    """The descriptor of a candidate's outputs on the fingerprint batch (see the module doc).

    Args:
        outputs: the candidate's outputs, a pytree of arrays (non-finite values allowed).

    Returns:
        At most BEHAVIOUR_SIZE floats (NaN or +-inf where the outputs had them).
    """
    leaves = [np.asarray(leaf, dtype=np.float64).ravel() for leaf in jax.tree.leaves(outputs)]
    values = np.concatenate(leaves) if leaves else np.zeros(0)
    folded = fold(squash(values))
    return [float(f"{v:.{_SIGNIFICANT}g}") for v in folded.tolist()]


def as_vector(descriptor: object) -> np.ndarray | None:
    """A descriptor as a float64 vector (None entries, as JSON stores NaN, become NaN); None
    when it is no list of numbers."""
    if not isinstance(descriptor, (list, tuple)) or not descriptor:
        return None
    values = []
    for value in descriptor:
        if value is None:
            values.append(math.nan)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            values.append(float(value))
        else:
            return None
    return np.asarray(values, dtype=np.float64)


def behaviour_distance(a: object, b: object) -> float:
    """The relative L2 distance ||a - b|| / max(||a||, ||b||) of two descriptors; +inf when
    either is missing or malformed, has a non-finite entry, or their lengths differ. Never
    raises."""
    x, y = as_vector(a), as_vector(b)
    if x is None or y is None or x.shape != y.shape:
        return math.inf
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return math.inf
    scale = max(float(np.linalg.norm(x)), float(np.linalg.norm(y)))
    if scale == 0.0:
        return 0.0
    return float(np.linalg.norm(x - y)) / scale


class BehaviourIndex:
    """Known descriptors stacked once (the comparable ones: finite, the same length), so that
    each candidate of a batch is compared with all of them as one matrix operation.

    Args:
        known: candidate id -> descriptor (malformed or non-finite ones are left out: they
            never match).
    """

    def __init__(self, known: Mapping[str, Sequence] | None = None):
        self.rows: dict[int, tuple[list[str], np.ndarray]] = {}  # length -> (ids, matrix)
        grouped: dict[int, tuple[list[str], list[np.ndarray]]] = {}
        for cid, descriptor in (known or {}).items():
            vector = as_vector(descriptor)
            if vector is not None and np.isfinite(vector).all():
                ids, vectors = grouped.setdefault(vector.size, ([], []))
                ids.append(cid)
                vectors.append(vector)
        for size, (ids, vectors) in grouped.items():
            self.rows[size] = (ids, np.stack(vectors))

    def nearest(self, descriptor: object) -> tuple[str, float] | None:
        """The known candidate nearest to `descriptor` (the first on ties) and its distance;
        None when nothing is comparable with it (then nothing matches)."""
        x = as_vector(descriptor)
        if x is None or not np.isfinite(x).all() or x.size not in self.rows:
            return None
        ids, matrix = self.rows[x.size]
        scale = np.maximum(np.linalg.norm(matrix, axis=1), np.linalg.norm(x))
        differences = np.linalg.norm(matrix - x, axis=1)
        distances = differences / np.where(scale > 0.0, scale, 1.0)  # 0 / 1 for two zeros
        best = int(np.argmin(distances))
        return ids[best], float(distances[best])


def nearest_behaviour(
    descriptor: object, known: Mapping[str, Sequence]
) -> tuple[str, float] | None:
    """The known candidate (candidate id -> descriptor) nearest to `descriptor`, and its
    distance; None when nothing is comparable. For many candidates against the same known
    descriptors, build a `BehaviourIndex` once."""
    return BehaviourIndex(known).nearest(descriptor)


def near_reason(candidate_id: str, distance: float, threshold: float) -> str:
    """The reason a behaviour near-duplicate stops with (starts with NEAR_REASON)."""
    return (
        f"{NEAR_REASON} {distance:.2g} of candidate {candidate_id} (relative distance of its "
        f"outputs on the probe batch; near-duplicates are those within {threshold:g}): "
        "change what the program computes, not how it is written"
    )


def is_near(stage: str, duplicate_of: str | None, reason: str | None) -> bool:
    """Whether an outcome (its stage, duplicate_of and reason) is a behaviour near-duplicate
    rejection (not an exact fingerprint match)."""
    return stage == "probes" and bool(duplicate_of) and str(reason or "").startswith(NEAR_REASON)
