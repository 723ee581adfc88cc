"""Per-sample independence of an exported artifact, checked by its behaviour at the exact sizes
the trainer calls it with.

Why: the structural check (artifact_check.py) reads ops; this checks what the compiled
program does. A row's outputs (and its VJP's, for a differentiable task) must be the same
whether the row is computed alone, in a batch of another size, at its place in a batch of the
trainer's own call size, or at another place in a permutation of that batch, beside
adversarial rows (zeros, signed zeros, tiny, huge, infinite and NaN values in each input, and
copies of the fingerprint batch). The sizes are read off the training program itself
(`training_call_sizes` traces BatchProgram's init and segment with `jax.make_jaxpr` and reads
the shape of every call of the artifact in the jaxpr: for the drift the minibatch x seeds, e.g.
128 x 4 = 512; for the optimizer every parameter leaf's size x seeds), so an artifact that
diverges only at the training size is caught there. Random rows come from the trusted probe
seed, never a fixed batch; the program probed is the verified `Variant` the trainer calls.

Bitwise or tolerance: measured on this CPU, honest artifacts (PPO-clip, LPO, an LPO network,
a symbolic drift, Adam, OPEN-lite; forward and VJP; sizes 1 to 4096 at three offsets; rows with
extreme values) are *not* bit-identical across batch sizes: a few values in 10^4 differ, by at
most 6.9e-7 relative (2.4e-7 absolute), where XLA's vectorised loop and its scalar remainder
round differently. Values therefore agree when both are NaN, equal, or within
ROW_RTOL * max(|a|, |b|) + ROW_ATOL (1e-5 and 1e-6: >= 4x the worst measured difference, far
below anything that changes training), and a VJP's also within SCALE_RTOL (1e-4) times its
output's 75th-percentile magnitude over the random rows: a gradient that is a sum of
cancelling terms rounds in units of its terms (`output_scales`). No false refusal measured:
10 honest drifts x 20 probe seeds and 4 honest optimizer rules x 8 probe seeds, at the classic
suite's call sizes; distilled width-8 students in benchmarks/RESULTS.md.

A differentiable artifact's VJP must also be linear in the cotangent
(`vjp(x, c * ct) == c * vjp(x, ct)`), at the trainer's cotangent (1 / minibatch size) and at
random scales: the probes differentiate with a cotangent of 1, so a VJP keyed on the
cotangent's magnitude (a plain-source jax.custom_vjp can do it) would otherwise show the probes
one gradient and training another.

Cost (2-core CPU shared with other jobs, load ~4): one compile per distinct size (a single jit
of every context compiled 4x slower); per candidate ~0.2-0.5 s for a drift (forward and VJP
at 3 sizes, and the linearity check), ~0.8 s for Adam and ~1.8 s for an OPEN-lite rule (12
sizes); reading the sizes off the training program ~1.7 s per task and trainer job for the
classic suite's 3 configs (tasks/behaviour.py caches it for the job's other candidates).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jax_core

from metarl.rl.components import Components
from metarl.rl.configs import PPOConfig
from metarl.rl.training import batch_functions, seed_keys
from metarl.rl.verifier.artifact import ArtifactRejected, ElementSignature, Variant, callable_from

ROW_RTOL = 1e-5
ROW_ATOL = 1e-6
SCALE_RTOL = 1e-4  # a VJP's values may also differ by this times the output's scale
LINEAR_RTOL = 1e-3
LINEAR_ATOL = 1e-4
TRACKED_ROWS = 64  # random rows followed through every context
SINGLE_ROWS = 4  # of which this many are also computed alone (size 1)
FLOAT_EDGES = (0.0, -0.0, 1e-40, -1e-40, 1e-7, -1e-7, 1.0, -1.0, 1e4, -1e4, 1e30, -1e30)
FLOAT_EDGES += (3.4e38, -3.4e38, math.inf, -math.inf, math.nan)
INT_EDGES = (0, 1, -1, 2, 2**31 - 1, -(2**31))
Rows = list  # one array per input: (rows, *slots)
Role = tuple  # (variant name, "forward" | "vjp")


class BehaviourRejected(ArtifactRejected):
    """The artifact's behaviour shows it is not a per-sample program (the message says how)."""


# --- the trainer's call sizes ----------------------------------------------------------------
def training_jaxprs(
    config: PPOConfig, select: Callable[[jax.Array], Components], seeds: Sequence[int]
) -> list:
    """The jaxprs of BatchProgram's init and segment for `config` (rl/training.py), traced,
    not compiled.

    Args:
        config: the run's configuration.
        select: index -> Components, as BatchProgram takes it.
        seeds: the training seeds (the program is vmapped over them).

    Returns:
        [init jaxpr, segment jaxpr] (ClosedJaxprs).
    """
    keys = seed_keys([int(s) for s in seeds])
    init, segment = batch_functions(config, select, scratch=False)  # as a candidate is trained
    index = jnp.asarray(0, jnp.int32)
    init_jaxpr, runner = jax.make_jaxpr(init, return_shape=True)(keys, index)
    return [init_jaxpr, jax.make_jaxpr(segment)(runner, index, index)]


def _subjaxprs(value: Any):
    if isinstance(value, jax_core.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, jax_core.Jaxpr):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _subjaxprs(item)


def exported_call_inputs(jaxpr) -> list[tuple[Any, tuple]]:
    """(Exported, input avals) of every call of an exported program in `jaxpr`, nested ones
    too: where, and at which shapes, a traced program calls an artifact (also the trainer's
    pre-flight's call sites, evaluation/preflight.py).

    Args:
        jaxpr: a Jaxpr or ClosedJaxpr.

    Returns:
        One pair per `call_exported` equation, in trace order.
    """
    jaxpr = jaxpr.jaxpr if isinstance(jaxpr, jax_core.ClosedJaxpr) else jaxpr
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "call_exported":
            found.append((eqn.params["exported"], tuple(v.aval for v in eqn.invars)))
        for value in eqn.params.values():
            for inner in _subjaxprs(value):
                found.extend(exported_call_inputs(inner))
    return found


def exported_calls(jaxpr) -> list[tuple[Any, int]]:
    """(Exported, flat size) of every call of an exported program in `jaxpr`, nested ones too.

    Args:
        jaxpr: a Jaxpr or ClosedJaxpr.

    Returns:
        One pair per `call_exported` equation.
    """
    return [(exported, int(avals[0].shape[0])) for exported, avals in exported_call_inputs(jaxpr)]


def training_call_sizes(
    variants: dict[str, Variant],
    signature: ElementSignature,
    components: Callable[[dict[str, Callable]], Callable[[jax.Array], Components]],
    configs: Sequence[PPOConfig],
    seeds: Sequence[int],
) -> dict[Role, tuple[int, ...]]:
    """The flat sizes the training programs call each program of the artifact with.

    Args:
        variants: the verified artifact (its programs are traced, never run).
        signature: the per-element signature.
        components: variant callables -> BatchProgram's `select` (the task's plumbing).
        configs: every configuration the candidate will be trained with.
        seeds: the training seeds.

    Returns:
        (variant name, "forward" | "vjp") -> sorted distinct sizes (empty: never called).

    Raises:
        BehaviourRejected: the jaxpr calls a program that is not one of the variants.
    """
    roles = {}
    for name, variant in variants.items():
        roles[id(variant.forward)] = (name, "forward")
        if variant.vjp is not None:
            roles[id(variant.vjp)] = (name, "vjp")
    calls = {
        name: callable_from(variant.forward, signature, variant.vjp)
        for name, variant in variants.items()
    }
    sizes: dict[Role, set[int]] = {role: set() for role in roles.values()}
    for config in configs:
        for jaxpr in training_jaxprs(config, components(calls), seeds):
            for exported, size in exported_calls(jaxpr):
                if id(exported) not in roles:
                    raise BehaviourRejected("the training program calls an unknown program")
                sizes[roles[id(exported)]].add(size)
    return {role: tuple(sorted(found)) for role, found in sizes.items()}


# --- rows ---------------------------------------------------------------------------------------
class _Capture:
    """Stands in for an Exported: records the flat rows it is called with (at run time, through
    a debug callback), returns zeros."""

    def __init__(self, inputs, outputs, store: list):
        self.inputs, self.outputs, self.store = inputs, outputs, store

    def call(self, *flat):
        jax.debug.callback(lambda *xs: self.store.append([np.asarray(x) for x in xs]), *flat)
        size = flat[0].shape[0]
        return tuple(jnp.zeros((size,) + tuple(s), d) for s, d in self.outputs)


def capture_rows(
    names: Sequence[str], signature: ElementSignature, run: Callable[[dict[str, Callable]], Any]
) -> dict[str, Rows]:
    """The per-element rows a task's plumbing feeds each variant when `run` calls it.

    Args:
        names: the variant names.
        signature: the per-element signature.
        run: calls the task's function built from variant callables (e.g. on the fingerprint
            batch); the callables return zeros.

    Returns:
        variant name -> the rows of its first call (variants never called are left out).
    """
    stores: dict[str, list] = {name: [] for name in names}
    calls = {}
    for name in names:
        forward = _Capture(signature.inputs, signature.outputs, stores[name])
        vjp = _Capture(signature.inputs + signature.outputs, signature.inputs, [])
        calls[name] = callable_from(forward, signature, vjp if signature.differentiable else None)
    jax.block_until_ready(run(calls))
    jax.effects_barrier()
    return {name: store[0] for name, store in stores.items() if store}


def _edges(dtype) -> np.ndarray:
    values = FLOAT_EDGES if np.issubdtype(dtype, np.floating) else INT_EDGES
    return np.asarray(values, dtype=dtype)


def random_rows(examples: Rows, count: int, rng: np.random.Generator) -> Rows:
    """`count` rows near the examples: each input taken from a random example row, floats
    scaled by exp(N(0, 0.25)) (sign kept), integers half the time replaced by one in [1, 2^20).

    Args:
        examples: example rows, one array per input.
        count: rows to draw.
        rng: the trusted probe seed's generator.
    """
    out = []
    for column in examples:
        picked = column[rng.integers(0, len(column), count)]
        if np.issubdtype(column.dtype, np.floating):
            scale = np.exp(rng.normal(0.0, 0.25, picked.shape))
            picked = (picked * scale).astype(column.dtype)
        else:
            fresh = rng.integers(1, 2**20, picked.shape).astype(column.dtype)
            picked = np.where(rng.random(picked.shape) < 0.5, picked, fresh)
        out.append(picked)
    return out


def edge_rows(examples: Rows, rng: np.random.Generator) -> Rows:
    """Adversarial rows: every example row as it is, and, for each input and each edge value
    of its dtype, a random example row with that input (all its slots) set to the edge."""
    parts = [examples]
    for index, column in enumerate(examples):
        edges = _edges(column.dtype)
        rows = random_rows(examples, len(edges), rng)
        rows[index] = np.broadcast_to(
            edges.reshape((-1,) + (1,) * (column.ndim - 1)), rows[index].shape
        ).copy()
        parts.append(rows)
    return _concat(*parts)


def cotangent_rows(signature: ElementSignature, scales: Sequence[float], count: int, rng) -> Rows:
    """Cotangent rows for a VJP: random signs times the given scales and random ones."""
    out = []
    for slots, dtype in signature.outputs:
        magnitude = np.where(
            rng.random(count) < 0.5,
            rng.choice(np.asarray(list(scales) + [1.0]), count),
            10.0 ** rng.uniform(-4, 1, count),
        )
        sign = rng.choice([-1.0, 1.0], count)
        value = (sign * magnitude).reshape((count,) + (1,) * len(slots))
        out.append(np.broadcast_to(value, (count,) + tuple(slots)).astype(dtype))
    return out


def _take(rows: Rows, index: np.ndarray) -> Rows:
    return [column[index] for column in rows]


def _concat(*parts: Rows) -> Rows:
    return [np.concatenate(columns) for columns in zip(*parts)]


# --- comparing ----------------------------------------------------------------------------------
def _differ(
    a: np.ndarray, b: np.ndarray, rtol: float = ROW_RTOL, atol: float | np.ndarray = ROW_ATOL
) -> np.ndarray:
    """Per row: whether any value differs beyond rtol * max(|a|, |b|) + atol (NaN equals NaN).

    Args:
        a, b: arrays of rows (the same shape).
        rtol: relative tolerance.
        atol: absolute tolerance, a number or one per row.
    """
    if not np.issubdtype(a.dtype, np.floating):
        return np.any((a != b).reshape(len(a), -1), axis=1)
    x, y = a.astype(np.float64), b.astype(np.float64)
    atol = np.reshape(np.broadcast_to(atol, (len(a),)), (len(a),) + (1,) * (a.ndim - 1))
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(x - y) <= rtol * np.maximum(np.abs(x), np.abs(y)) + atol
    same = (x == y) | (np.isnan(x) & np.isnan(y)) | close
    return ~np.all(same.reshape(len(a), -1), axis=1)


def output_scales(reference: list[np.ndarray]) -> list[float]:
    """Each output's typical magnitude over the tracked (random, trusted) rows: the 75th
    percentile of its finite absolute values (0 when none is finite).

    Why: a gradient that is a sum of cancelling terms (an LPO network's VJP) loses digits in
    units of its terms, not of itself. Measured on width-8 students distilled from PPO-clip
    (smoke suite's sizes): the VJP gave 0.02669036 in a batch of 128 and 0.02668905 in one of 64
    (1.3e-6 apart), and 0.17129415 against 0.17130002 (5.9e-6 apart, the output's scale 0.108),
    refusing 2 honest checks in 135 probe seeds under a tolerance relative to the value alone.
    Only VJPs get the scale term (SCALE_RTOL times it): a forward value could inflate its own
    scale with constants that change no gradient, a VJP only with gradients that training
    follows. A percentile, not the maximum, so that a few huge gradients on random rows
    cannot widen the tolerance; 1e-4 of a typical gradient is far below what moves training.

    Args:
        reference: the outputs of the tracked rows alone, one array per output.

    Returns:
        One scale per output.
    """
    scales = []
    for values in reference:
        values = np.abs(np.asarray(values, np.float64)).ravel()
        finite = values[np.isfinite(values)]
        scales.append(float(np.quantile(finite, 0.75)) if finite.size else 0.0)
    return scales


def _first_difference(
    got: list,
    expected: list,
    inputs: Rows,
    what: str,
    context: str,
    reference: str,
    scales: Sequence[float] | None = None,
) -> None:
    """Raise BehaviourRejected at the first row whose outputs differ beyond ROW_RTOL times the
    larger value plus ROW_ATOL plus SCALE_RTOL times the output's scale (output_scales).

    Args:
        got, expected: the outputs (one array per output) of the same rows in two contexts.
        inputs: those rows.
        what: names the program.
        context, reference: the two contexts, for the reason.
        scales: each output's typical magnitude (output_scales); None: 0.
    """
    scales = list(scales) if scales is not None else [0.0] * len(got)
    for index, (a, b) in enumerate(zip(got, expected)):
        atol = ROW_ATOL + SCALE_RTOL * scales[index]
        bad = np.flatnonzero(_differ(np.asarray(a), np.asarray(b), atol=atol))
        if bad.size:
            row = int(bad[0])
            shown = ", ".join(np.array2string(c[row], precision=6) for c in inputs)
            raise BehaviourRejected(
                f"the {what} is not a per-sample program: output {index} of the row ({shown}) "
                f"is {np.array2string(np.asarray(a)[row], precision=8)} {context} but "
                f"{np.array2string(np.asarray(b)[row], precision=8)} {reference} ({bad.size} rows "
                f"differ beyond {ROW_RTOL:g} relative + {atol:.3g})"
            )


def _run(call: Callable, rows: Rows, what: str) -> list[np.ndarray]:
    """The program's outputs on `rows`, one array per output.

    Raises:
        BehaviourRejected: the program fails on them (e.g. a shape assertion that holds only
            at some sizes: a program that runs at the probes' sizes and fails at the trainer's).
    """
    try:
        result = jax.block_until_ready(call(*rows))
    except Exception as error:  # XLA's runtime and shape errors have no common type
        raise BehaviourRejected(
            f"the {what} fails in a batch of {len(rows[0])}: {type(error).__name__}: "
            f"{' '.join(str(error).split())[:200]}"
        ) from error
    result = result if isinstance(result, (tuple, list)) else (result,)
    return [np.asarray(x) for x in result]


def check_independent(
    call: Callable,
    tracked: Rows,
    fillers: Rows,
    sizes: Sequence[int],
    rng,
    what: str,
    gradient: bool = False,
) -> None:
    """A row's outputs do not depend on the batch it is computed in.

    Contexts: the tracked rows alone (the reference), the first SINGLE_ROWS of them each alone
    (size 1), and for every size S in `sizes` a batch of S rows with the tracked rows at random
    places among random fillers, and that batch permuted. One compile per size (a single jit
    of every context compiles slower: measured 8.3 s against 2.2 s for an OPEN-lite rule at 12
    sizes).

    Args:
        call: the jitted program (`jax.jit(exported.call)`), taking the rows' inputs.
        tracked: rows followed through every context.
        fillers: rows the batches are filled with (adversarial and random ones).
        sizes: the trainer's call sizes.
        rng: the trusted probe seed's generator.
        what: names the program in the reason ("drift", "drift's VJP", ...).
        gradient: the program is a VJP: its values may also differ by SCALE_RTOL times their
            output's scale (output_scales).

    Raises:
        BehaviourRejected: a row's outputs changed with its context.
    """
    count = len(tracked[0])
    contexts = [tracked] + [_take(tracked, np.array([i])) for i in range(SINGLE_ROWS)]
    plans = []
    for size in sizes:
        places = rng.choice(size, min(count, size), replace=False)
        batch = _take(fillers, rng.integers(0, len(fillers[0]), size))
        for column, source in zip(batch, tracked):
            column[places] = source[: len(places)]
        permutation = rng.permutation(size)
        plans.append((size, places, permutation, batch))
        contexts += [batch, _take(batch, permutation)]
    outputs = [_run(call, context, what) for context in contexts]
    reference = outputs[0]
    scales = output_scales(reference) if gradient else None
    for i in range(SINGLE_ROWS):
        _first_difference(
            outputs[1 + i],
            [o[i : i + 1] for o in reference],
            _take(tracked, np.array([i])),
            what,
            "computed alone (a batch of 1)",
            f"in a batch of {count}",
            scales,
        )
    for k, (size, places, permutation, batch) in enumerate(plans):
        placed, permuted = outputs[1 + SINGLE_ROWS + 2 * k], outputs[2 + SINGLE_ROWS + 2 * k]
        _first_difference(
            [o[places] for o in placed],
            [o[: len(places)] for o in reference],
            _take(tracked, np.arange(len(places))),
            what,
            f"in a batch of {size} (the trainer's call size) among adversarial rows",
            f"in a batch of {count}",
            scales,
        )
        _first_difference(
            permuted,
            [o[permutation] for o in placed],
            _take(batch, permutation),
            what,
            f"in a permuted batch of {size}",
            "before the permutation",
            scales,
        )


def check_vjp_linear(
    call: Callable, rows: Rows, cotangents: Rows, scales: Sequence[float], what: str
) -> None:
    """`vjp(x, s * ct) / s == vjp(x, ct)` for every scale s (the trainer's cotangent is not
    the probes' 1), within LINEAR_RTOL relative plus LINEAR_ATOL times the row's cotangent.

    The tolerance is looser than a row's (ROW_RTOL): the two sides round differently, and a
    gradient that is a sum of cancelling terms loses digits in units of its terms (measured
    on an LPO network: 1 row in 64 off by more than 1e-5). A VJP keyed on the cotangent
    changes the gradient by a factor, far beyond it.

    Args:
        call: the jitted VJP program (inputs, then cotangents).
        rows: primal input rows.
        cotangents: cotangent rows.
        scales: the factors tried.
        what: names the program in the reason.

    Raises:
        BehaviourRejected: the VJP is not linear in its cotangent.
    """
    contexts = [rows + cotangents] + [
        rows + [(c * np.asarray(s, c.dtype)).astype(c.dtype) for c in cotangents] for s in scales
    ]
    outputs = [_run(call, context, what) for context in contexts]
    magnitude = np.max(
        np.concatenate([np.abs(c).reshape(len(c), -1) for c in cotangents], axis=1), axis=1
    )
    for scale, scaled in zip(scales, outputs[1:]):
        for got, want in zip(scaled, outputs[0]):
            unscaled = got.astype(np.float64) / scale
            bad = np.flatnonzero(
                _differ(unscaled, want, LINEAR_RTOL, LINEAR_ATOL * magnitude.astype(np.float64))
            )
            if bad.size:
                raise BehaviourRejected(
                    f"the {what} is not linear in its cotangent: scaling the cotangent by "
                    f"{scale:g} changed its gradient by another factor on {bad.size} of "
                    f"{len(got)} rows (the trainer differentiates a mean, with a cotangent of "
                    "1 / minibatch size)"
                )


def check_variants(
    variants: dict[str, Variant],
    signature: ElementSignature,
    sizes: dict[Role, tuple[int, ...]],
    examples: dict[str, Rows],
    probe_seed: int,
    cotangent_scales: Sequence[float] = (),
) -> None:
    """Every program of the artifact is per-sample at the trainer's sizes (see the top).

    Args:
        variants: the verified artifact.
        signature: the per-element signature.
        sizes: the trainer's call sizes (training_call_sizes).
        examples: variant name -> example rows (e.g. the fingerprint batch's); a variant
            without examples borrows another's.
        probe_seed: seeds the random rows (trusted; unknown to the candidate).
        cotangent_scales: the trainer's cotangents, for a differentiable signature.

    Raises:
        BehaviourRejected: with the first difference found.
    """
    rng = np.random.default_rng([int(probe_seed), 0xBE4A])
    fallback = next(iter(examples.values()))
    for name, variant in variants.items():
        base = examples.get(name, fallback)
        tracked = random_rows(base, TRACKED_ROWS, rng)
        fillers = _concat(edge_rows(base, rng), random_rows(base, 4 * TRACKED_ROWS, rng), tracked)
        forward_sizes = sizes.get((name, "forward"), ())
        forward = jax.jit(variant.forward.call)
        check_independent(forward, tracked, fillers, forward_sizes, rng, "program")
        if variant.vjp is None:
            continue
        scales = list(cotangent_scales) + [1.0]
        count = len(tracked[0])
        tracked_vjp = tracked + cotangent_rows(signature, scales, count, rng)
        fillers_vjp = fillers + cotangent_rows(signature, scales, len(fillers[0]), rng)
        vjp_sizes = sizes.get((name, "vjp"), ())
        vjp = jax.jit(variant.vjp.call)
        check_independent(
            vjp, tracked_vjp, fillers_vjp, vjp_sizes, rng, "program's VJP", gradient=True
        )
        factors = list(cotangent_scales) + list(10.0 ** rng.uniform(-4, 2, 3))
        check_vjp_linear(vjp, tracked, tracked_vjp[len(tracked) :], factors, "program's VJP")
