"""Candidate programs as exported artifacts: the only form in which candidate code reaches the
trusted trainer.

Why: a candidate is arbitrary Python (the static check is a friendly filter, not a barrier), so
the process that runs its Python must be disposable and must never train, score or report. The
sandboxed *tracer* runs the candidate once, per element, and exports what it computes with
`jax.export` (StableHLO, serialised, with its VJP where the trainer differentiates through
it); the *trainer* deserialises that artifact, verifies it here, and calls it inside its own
jitted PPO. Probes and training run the same artifact, so a candidate cannot behave one way in
the probes and another in training, and nothing it does at trace time (patched modules, flipped
settings, mutable state, reading shapes) survives into the program that is scored.

**Elementwise by construction.** The tracer exports `jax.vmap(per_element)` over a symbolic
leading axis `n`: the candidate sees one element (ratio and advantage as scalars; for the
optimizer grad, param, step, progress, lr as scalars and momentum [5], state [4]), so it cannot
read the trainer's shapes, reduce across the batch or depend on positions. The artifact is then
called on flattened inputs, and batching (vmap over training seeds, later over candidates)
folds every batched axis into `n`: an element's value does not depend on how many others are
computed with it (up to rounding: XLA's vectorised loop and its scalar remainder may differ
in the last bit, measured at most 6.9e-7 relative; see behaviour.py).

**Verified, not trusted.** A compromised tracer can send any bytes, so `load_exported` checks
the deserialised artifact before anything compiles it:
- no effects, one device, exactly the trainer's platform, no disabled safety checks, the
  exact signature the task expects (and a VJP with its own, when the trainer differentiates);
- its StableHLO is a per-element program (artifact_check.py: the dialects, no custom calls,
  no communication, no random numbers, and the batch axis followed op by op: rows stay rows);
- then, in the trainer, its behaviour (behaviour.py, tasks/behaviour.py): each row's
  outputs are the same alone, among adversarial rows and permuted, at the exact sizes the
  training program calls it with; and the drift's probes check that its VJP is the slope of
  its values (tasks/drift/probes.py).
Measured on the 2-core CPU: exporting a drift takes ~0.1 s and is ~8 KB, verifying it ~10 ms.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
from jax import export as jax_export

from metarl.rl.verifier.artifact_check import SYMBOL, ArtifactRejected, check_module

__all__ = ["ArtifactRejected", "SYMBOL", "check_module"]  # re-exported: callers import them here

MAX_ARTIFACT_BYTES = 4 * 2**20  # per variant; a drift is ~8 KB, an optimizer rule ~20 KB


@dataclass(frozen=True)
class ElementSignature:
    """What a task's per-element function takes and returns.

    Each entry is (slot shape, dtype name): the shape of one element's value (() for a scalar,
    (5,) for the five momentum EMAs of one parameter element, ...). The exported artifact takes
    and returns arrays of shape (n, *slot shape).
    """

    inputs: tuple[tuple[tuple[int, ...], str], ...]
    outputs: tuple[tuple[tuple[int, ...], str], ...]
    differentiable: bool  # the trainer differentiates through it: export the VJP as well


# --- export (runs in the sandboxed tracer, and in trusted code for the seed programs) ---------
def export_variants(
    functions: dict[str, Callable], signature: ElementSignature, platform: str
) -> dict[str, bytes]:
    """Export each per-element function, vmapped over a symbolic axis, as serialised bytes.

    Args:
        functions: variant name -> per-element function (see Task.per_element).
        signature: the per-element signature every variant follows.
        platform: the platform the trainer compiles for ("cpu", "cuda").

    Returns:
        variant name -> `jax.export` serialisation (with the VJP when differentiable).
    """
    (n,) = jax_export.symbolic_shape(SYMBOL)
    specs = [
        jax.ShapeDtypeStruct((n,) + tuple(slots), jnp.dtype(dtype))
        for slots, dtype in signature.inputs
    ]
    out = {}
    for name, function in functions.items():
        exported = jax_export.export(jax.jit(jax.vmap(function)), platforms=[platform])(*specs)
        out[name] = bytes(exported.serialize(vjp_order=1 if signature.differentiable else 0))
    return out


def encode(variants: dict[str, bytes]) -> dict[str, str]:
    """Bytes -> base64 text, to cross a JSON channel."""
    return {name: base64.b64encode(blob).decode("ascii") for name, blob in variants.items()}


def decode(message: object, names: set[str]) -> dict[str, bytes]:
    """Base64 text -> bytes, refusing anything but exactly the expected variant names."""
    if not isinstance(message, dict) or set(message) != names:
        got = sorted(message) if isinstance(message, dict) else type(message).__name__
        raise ArtifactRejected(f"the artifact has variants {got}; expected {sorted(names)}")
    out = {}
    for name, text in message.items():
        if not isinstance(text, str) or len(text) > MAX_ARTIFACT_BYTES * 4 // 3 + 4:
            raise ArtifactRejected(
                f"variant {name!r} is not text of at most {MAX_ARTIFACT_BYTES} bytes"
            )
        try:
            out[name] = base64.b64decode(text.encode("ascii"), validate=True)
        except ValueError as error:
            raise ArtifactRejected(f"variant {name!r} is not valid base64: {error}") from error
    return out


# --- verification (trusted) ---------------------------------------------------------------------
def _check_avals(avals, expected, what: str) -> None:
    if len(avals) != len(expected):
        raise ArtifactRejected(f"the artifact has {len(avals)} {what}; expected {len(expected)}")
    for index, (aval, (slots, dtype)) in enumerate(zip(avals, expected)):
        shape = tuple(aval.shape)
        if (
            not shape
            or isinstance(shape[0], int)
            or str(shape[0]) != SYMBOL
            or tuple(shape[1:]) != tuple(slots)
            or any(not isinstance(d, int) for d in shape[1:])
            or aval.dtype != jnp.dtype(dtype)
        ):
            raise ArtifactRejected(
                f"{what} {index} is {aval.dtype}{list(map(str, shape))}; expected "
                f"{dtype}[{SYMBOL}{''.join(f', {d}' for d in slots)}]"
            )


@dataclass(frozen=True)
class Variant:
    """One verified variant: the forward program and, when differentiable, its VJP. The
    trainer calls, and the behavioural checks (behaviour.py) probe, these same objects."""

    forward: jax_export.Exported
    vjp: jax_export.Exported | None


def _parsed(read: Callable, what: str):
    """`read()`, where it parses candidate bytes: whatever the parser raises is a refusal.

    Why: `jax.export.deserialize` reads only the flatbuffer; the StableHLO bytecode and the
    VJP are parsed later, when `mlir_module()` and `vjp()` are called. A byte-flipped artifact
    that deserialises then raises there (measured: `JaxRuntimeError: INVALID_ARGUMENT` from
    `mlir_module()`), which is the candidate's doing, not the evaluator's.
    """
    try:
        return read()
    except ArtifactRejected:
        raise
    except Exception as error:  # the parser's error type varies: JaxRuntimeError, ValueError
        raise ArtifactRejected(
            f"the artifact's {what} does not parse ({type(error).__name__})"
        ) from error


def verify(exported, signature: ElementSignature, platform: str) -> Variant:
    """Check that `exported` may run in the trainer.

    Args:
        exported: a deserialised artifact variant.
        signature: the per-element signature the task expects.
        platform: the platform the trainer compiles for.

    Returns:
        The verified variant (with its VJP when the signature is differentiable).

    Raises:
        ArtifactRejected: with the first reason found.
    """
    if exported.nr_devices != 1:
        raise ArtifactRejected("the artifact is for more than one device")
    if exported.ordered_effects or exported.unordered_effects:
        raise ArtifactRejected("the artifact has side effects")
    if exported.disabled_safety_checks:
        raise ArtifactRejected("the artifact disables JAX's safety checks")
    if tuple(exported.platforms) != (platform,):
        raise ArtifactRejected(
            f"the artifact is for {list(exported.platforms)}, not [{platform!r}]"
        )
    _check_avals(exported.in_avals, signature.inputs, "input")
    _check_avals(exported.out_avals, signature.outputs, "output")
    check_module(_parsed(exported.mlir_module, "module"))
    if not signature.differentiable:
        return Variant(exported, None)
    if not _parsed(exported.has_vjp, "VJP"):
        raise ArtifactRejected("the artifact has no VJP; the trainer differentiates through it")
    vjp = _parsed(exported.vjp, "VJP")
    if (
        vjp.nr_devices != 1
        or vjp.ordered_effects
        or vjp.unordered_effects
        or vjp.disabled_safety_checks
    ):
        raise ArtifactRejected("the artifact's VJP has side effects or disabled checks")
    _check_avals(vjp.in_avals, signature.inputs + signature.outputs, "VJP input")
    _check_avals(vjp.out_avals, signature.inputs, "VJP output")
    check_module(_parsed(vjp.mlir_module, "VJP module"))
    return Variant(exported, vjp)


# --- calling an artifact (trusted) --------------------------------------------------------------
def _elementwise(exported, in_slots: list[tuple], out_slots: list[tuple]) -> Callable:
    """Call a per-element artifact on arrays shaped (*slots, *P), for any P, under any vmap.

    Every element of P is one element of the symbolic axis; vmap adds its axis to P (so any
    nesting of vmaps is one flat call, and no element sees how many others there are).
    """

    @jax.custom_batching.custom_vmap
    def call(*args):
        batch = args[0].shape[len(in_slots[0]) :]
        size = math.prod(batch)
        flat = [
            jnp.moveaxis(jnp.reshape(a, tuple(s) + (size,)), -1, 0) for a, s in zip(args, in_slots)
        ]
        outs = exported.call(*flat)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        return tuple(
            jnp.reshape(jnp.moveaxis(o, 0, -1), tuple(s) + batch) for o, s in zip(outs, out_slots)
        )

    @call.def_vmap
    def _batched(axis_size, in_batched, *args):
        moved = []
        for array, batched, slots in zip(args, in_batched, in_slots):
            if not batched:
                array = jnp.broadcast_to(array, (axis_size,) + array.shape)
            moved.append(jnp.moveaxis(array, 0, len(slots)))
        outs = call(*moved)
        return (
            tuple(jnp.moveaxis(o, len(s), 0) for o, s in zip(outs, out_slots)),
            tuple(True for _ in outs),
        )

    return call


def callable_from(exported, signature: ElementSignature, vjp=None) -> Callable:
    """A function of arrays shaped (*slots, *P) returning a tuple of outputs, differentiable
    through the artifact's own exported VJP when the signature says so.

    Args:
        exported: the forward program (an Exported, or anything with its `call`).
        signature: the per-element signature.
        vjp: the VJP program to differentiate through (default: `exported.vjp()`).
    """
    in_slots = [tuple(s) for s, _ in signature.inputs]
    out_slots = [tuple(s) for s, _ in signature.outputs]
    forward = _elementwise(exported, in_slots, out_slots)
    if not signature.differentiable:
        return forward
    backward = _elementwise(vjp or exported.vjp(), in_slots + out_slots, in_slots)

    @jax.custom_vjp
    def function(*args):
        return forward(*args)

    def function_fwd(*args):
        return forward(*args), args

    def function_bwd(primals, cotangents):
        return tuple(backward(*primals, *cotangents))

    function.defvjp(function_fwd, function_bwd)
    return function


def load_exported(
    blobs: dict[str, bytes], signature: ElementSignature, platform: str
) -> dict[str, Variant]:
    """Deserialise and verify every variant.

    Args:
        blobs: variant name -> serialised artifact (untrusted bytes).
        signature: the per-element signature the task expects.
        platform: the platform the trainer compiles for.

    Returns:
        variant name -> the verified Variant.

    Raises:
        ArtifactRejected: with one reason, for anything the trainer must not run.
    """
    out = {}
    for name, blob in blobs.items():
        if len(blob) > MAX_ARTIFACT_BYTES:
            raise ArtifactRejected(f"variant {name!r} is larger than {MAX_ARTIFACT_BYTES} bytes")
        try:
            exported = jax_export.deserialize(bytearray(blob))
        except ArtifactRejected:
            raise
        except Exception as error:  # a malformed flatbuffer raises whatever its parser raises
            raise ArtifactRejected(
                f"variant {name!r} does not deserialise ({type(error).__name__})"
            ) from error
        out[name] = verify(exported, signature, platform)
    return out


def callables(variants: dict[str, Variant], signature: ElementSignature) -> dict[str, Callable]:
    """variant name -> callable (see callable_from), built from the verified variants."""
    return {
        name: callable_from(variant.forward, signature, variant.vjp)
        for name, variant in variants.items()
    }


def load_variants(
    blobs: dict[str, bytes], signature: ElementSignature, platform: str
) -> dict[str, Callable]:
    """Deserialise and verify every variant; variant name -> callable (see callable_from).

    Raises:
        ArtifactRejected: with one reason, for anything the trainer must not run.
    """
    return callables(load_exported(blobs, signature, platform), signature)
