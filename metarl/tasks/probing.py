"""Shared machinery for the tasks' probes (stage 2 of the cascade).

Probes run only inside the sandbox worker, on a candidate function already loaded there. A task's
`probes(function, rng_seed) -> ProbeReport` calls the candidate on fresh random inputs and
checks the contract; the first violated check becomes the report's one reason. Messages are
written for the LLM that has to fix the program: the exception type, the line of the candidate
that raised it (frames whose filename is "<candidate>"), and what was expected.
"""

from __future__ import annotations

import hashlib
import linecache
import re
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

CANDIDATE_FILENAME = "<candidate>"
MAX_MESSAGE_CHARS = 500


@dataclass
class ProbeReport:
    ok: bool
    reason: str | None = None
    warnings: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # names of the checks that passed


class ProbeFailure(Exception):
    """Raised inside a probe to stop with one reason."""


def register_candidate_source(source: str) -> None:
    """Make the candidate's lines available to tracebacks (filename "<candidate>")."""
    lines = source.splitlines(keepends=True)
    linecache.cache[CANDIDATE_FILENAME] = (len(source), None, lines, CANDIDATE_FILENAME)


def _short(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    message = " ".join(message.strip().split())
    return message if len(message) <= limit else message[: limit - 3] + "..."


def candidate_frame(error: BaseException) -> tuple[int, str] | None:
    """(line number, line text) of the innermost candidate frame in `error`'s traceback chain."""
    seen = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = [
            f
            for f in traceback.extract_tb(current.__traceback__)
            if f.filename == CANDIDATE_FILENAME
        ]
        if frames:
            frame = frames[-1]
            text = frame.line or linecache.getline(CANDIDATE_FILENAME, frame.lineno or 0)
            return frame.lineno or 0, (text or "").strip()
        current = current.__cause__ or current.__context__
    return None


def describe_exception(error: BaseException, doing: str, expected: str = "") -> str:
    """`TypeError at line 4 (`return x[:, None]`) while <doing>: <message>. Expected: ...`"""
    where = candidate_frame(error)
    location = (
        f" at line {where[0]} (`{where[1]}`)"
        if where and where[1]
        else (f" at line {where[0]}" if where else "")
    )
    message = " ".join(str(error).split("See https://")[0].split())
    message = re.sub(
        r"The error occurred while tracing the function \S+ at \S+ for \S+\. ?", "", message
    )
    hint = _hint(error)
    text = f"{type(error).__name__}{location} while {doing}: {_short(message)}"
    if hint:
        text += f" ({hint})"
    if expected:
        text += f". Expected: {expected}"
    return text


def _hint(error: BaseException) -> str:
    name = type(error).__name__
    if name in (
        "TracerBoolConversionError",
        "ConcretizationTypeError",
        "TracerIntegerConversionError",
    ):
        return (
            "the function is traced by jax.jit: no Python if/while/bool()/float()/int() on "
            "array values; use jnp.where, lax.cond or lax.select"
        )
    if name == "TracerArrayConversionError":
        return "numpy cannot operate on traced arrays: use jax.numpy (jnp) throughout"
    if name == "UnexpectedTracerError":
        return "do not store traced values outside the function"
    if name == "MemoryError" or "RESOURCE_EXHAUSTED" in str(error):
        return "the program ran out of memory: keep intermediate arrays the size of the inputs"
    return ""


def call(doing: str, function: Callable, *args, expected: str = "", **kwargs):
    """Run `function(*args)`; turn any exception into a ProbeFailure with a readable reason."""
    try:
        result = function(*args, **kwargs)
        jax.block_until_ready(result)  # runtime errors (e.g. out of memory) surface here
        return result
    except ProbeFailure:
        raise
    except Exception as error:  # the candidate's failure, reported to the proposer
        raise ProbeFailure(describe_exception(error, doing, expected)) from error


def check_array(
    value: Any, what: str, shape: tuple, dtype=np.float32, context: str = ""
) -> np.ndarray:
    """The value is an array of exactly `shape` and `dtype` (no silent broadcasting)."""
    got_shape = getattr(value, "shape", None)
    got_dtype = getattr(value, "dtype", None)
    if got_shape is None or got_dtype is None:
        raise ProbeFailure(
            f"{what} is a {type(value).__name__}, not an array{context}; expected a float32 array "
            f"of shape {tuple(shape)}"
        )
    if tuple(got_shape) != tuple(shape):
        raise ProbeFailure(
            f"{what} has shape {tuple(got_shape)}{context}; expected exactly {tuple(shape)}"
        )
    if np.dtype(got_dtype) != np.dtype(dtype):
        raise ProbeFailure(
            f"{what} has dtype {np.dtype(got_dtype).name}{context}; expected {np.dtype(dtype).name}"
        )
    return np.asarray(value)


def _close(got: Any, expected: np.ndarray) -> bool:
    got = np.asarray(got, np.float64)
    return got.shape == expected.shape and np.allclose(
        got, expected, rtol=1e-4, atol=1e-5, equal_nan=True
    )


def check_same_in_2d(
    name: str, applied: Callable, inputs: Sequence[np.ndarray], reference: np.ndarray, rows: int = 8
) -> None:
    """An elementwise function gives the same values when its 1-D inputs are laid out in 2-D.

    Args:
        name: the function's name in messages (drift, value_loss).
        applied: the jitted candidate on the per-sample arrays (static arguments bound).
        inputs: its 1-D per-sample arrays; reference: its float64 values on them.
        rows: the 2-D layout's rows (the batch must divide by it).

    Raises:
        ProbeFailure: an exception, a result of another shape or dtype, or other values.
    """
    grid = (rows, len(reference) // rows)
    out = call(
        f"calling {name} on 2-D inputs of shape {grid}",
        applied,
        *(jnp.asarray(x.reshape(grid)) for x in inputs),
        expected=f"an array of the inputs' shape {grid}",
    )
    values = check_array(out, f"{name}'s result", grid, context=f" for inputs of shape {grid}")
    if not _close(values.ravel(), reference):
        raise ProbeFailure(
            f"{name} is not elementwise: reshaping the inputs to 2-D changed the values of the "
            "same samples (no reductions over the batch, no dependence on positions or shapes)"
        )


def check_independent_samples(
    name: str,
    applied: Callable,
    inputs: Sequence[np.ndarray],
    reference: np.ndarray,
    rng: np.random.Generator,
    arguments: str,
) -> None:
    """Each output element depends only on the same element of the inputs: permuting the
    samples permutes the values, and removing half leaves the others' values.

    Args:
        name, applied, inputs, reference: as `check_same_in_2d`.
        rng: draws the permutation; arguments: the inputs' names in the message.

    Raises:
        ProbeFailure: an exception, or values that moved.
    """
    permutation = rng.permutation(len(reference))
    out = call(
        f"calling {name} on permuted inputs",
        applied,
        *(jnp.asarray(x[permutation]) for x in inputs),
    )
    half = len(reference) // 2
    head = call(
        f"calling {name} on the first half of the minibatch",
        applied,
        *(jnp.asarray(x[:half]) for x in inputs),
    )
    if not _close(out, reference[permutation]) or not _close(head, reference[:half]):
        raise ProbeFailure(
            f"{name} is not elementwise: permuting the samples or removing some changed the "
            f"values of the others; each output element may depend only on the same element of "
            f"{arguments} (no means, sums, norms, sorting or positions)"
        )


def check_vmaps(
    name: str,
    function: Callable,
    inputs: Sequence[np.ndarray],
    reference: np.ndarray,
    rows: int = 4,
) -> None:
    """`jax.vmap` of the candidate over a leading axis gives its values (the meta-learners and
    the batched trainer vmap it over members, seeds and tasks).

    Args:
        name, inputs, reference: as `check_same_in_2d`.
        function: the candidate on the per-sample arrays (static arguments bound), not jitted.

    Raises:
        ProbeFailure: an exception, a result of another shape or dtype, or other values.
    """
    grid = (rows, len(reference) // rows)
    out = call(
        f"calling jax.vmap({name}) over a leading axis (inputs of shape {grid})",
        jax.jit(jax.vmap(function)),
        *(jnp.asarray(x.reshape(grid)) for x in inputs),
    )
    values = check_array(out, f"{name}'s result under jax.vmap", grid)
    if not _close(values.ravel(), reference):
        raise ProbeFailure(
            f"{name} is not elementwise: it gives different values under jax.vmap than without "
            "it (no reductions over the batch)"
        )


def first_nonfinite(values: np.ndarray) -> int | None:
    bad = np.flatnonzero(~np.isfinite(np.asarray(values, dtype=np.float64)))
    return int(bad[0]) if bad.size else None


def fingerprint_outputs(outputs: Any, digits: int = 4) -> str:
    """A hash of `outputs` (a pytree of arrays) rounded to `digits` significant digits."""
    parts = []
    for leaf in jax.tree.leaves(outputs):
        array = np.asarray(leaf, dtype=np.float64).ravel()
        parts.append(f"{array.size}:")
        with np.errstate(all="ignore"):
            parts.append(
                ",".join(f"{v:.{digits - 1}e}" if np.isfinite(v) else str(v) for v in (array + 0.0))
            )
        parts.append(";")
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:16]


def fingerprint(function: Callable, inputs: tuple) -> str:
    """Evaluate `function(*inputs)` under jit (non-array inputs are static) and hash the result."""
    return fingerprint_outputs(probe_outputs(function, inputs))


def probe_outputs(function: Callable, inputs: tuple) -> Any:
    """`function(*inputs)` under jit (non-array inputs are static): the outputs `fingerprint`
    hashes (the cascade also derives its behaviour descriptor from them)."""

    positions = [i for i, x in enumerate(inputs) if hasattr(x, "shape")]

    def traced(*arrays):
        args = list(inputs)
        for i, array in zip(positions, arrays):
            args[i] = array
        return function(*args)

    return call(
        "computing the behaviour fingerprint", jax.jit(traced), *[inputs[i] for i in positions]
    )


def run_checks(checks: list[tuple[str, Callable[[list[str]], None]]]) -> ProbeReport:
    """Run named checks in order; each may append warnings; the first failure stops."""
    warnings: list[str] = []
    passed: list[str] = []
    for name, check in checks:
        try:
            check(warnings)
        except ProbeFailure as failure:
            return ProbeReport(ok=False, reason=str(failure), warnings=warnings, checks=passed)
        passed.append(name)
    return ProbeReport(ok=True, warnings=warnings, checks=passed)


# float32's relative rounding: a finite difference of values near v over a step h cannot
# resolve slopes below ~eps v / h (a saturating drift, tanh(A (r - 1))^2 at |A (r - 1)| ~ 6,
# changes by less than that)
FLOAT32_EPS = float(np.finfo(np.float32).eps)


def slope_disagreements(
    values: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    slope: np.ndarray,
    widths: Sequence[np.ndarray],
    rtol: float,
    atol: float,
) -> np.ndarray:
    """Where a gradient is not the slope of the values (the probes' stop_gradient check).

    At each point the gradient must lie between the one-sided finite differences of the values
    (both sides, so a kink passes with either slope), within `rtol` x scale + `atol` + what
    float32 rounding of the two values can move a difference by, for at least one step width.

    Args:
        values: float32 points (same shape as x) -> the values there (the other inputs fixed).
        x: the float32 points the gradient was taken at.
        slope: the gradient at x (what training follows).
        widths: step widths to try, each an array of x's shape (e.g. 1e-3 x |x|).
        rtol, atol: the tolerance.

    Returns:
        The indices of the points where no step width agrees.
    """
    x64 = x.astype(np.float64)
    base = np.asarray(values(x), np.float64)
    slope = np.asarray(slope, np.float64)
    agrees = np.zeros(x.shape, bool)
    for width in widths:
        sides, rounding = [], np.zeros(x.shape)
        for sign in (1.0, -1.0):
            moved = (x64 + sign * width).astype(np.float32)
            shifted = np.asarray(values(moved), np.float64)
            step = moved.astype(np.float64) - x64
            sides.append((shifted - base) / step)
            magnitude = np.maximum(np.abs(shifted), np.abs(base))
            rounding = np.maximum(rounding, 4 * FLOAT32_EPS * magnitude / np.abs(step))
        low, high = np.minimum(*sides), np.maximum(*sides)
        scale = np.maximum(np.maximum(np.abs(low), np.abs(high)), np.abs(slope))
        tolerance = rtol * scale + atol + rounding
        with np.errstate(invalid="ignore", divide="ignore"):
            agrees |= (slope >= low - tolerance) & (slope <= high + tolerance)
    return np.flatnonzero(~agrees)
