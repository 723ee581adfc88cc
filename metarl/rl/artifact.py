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
folds every batched axis into `n`: an element's value never depends on how many others are
computed with it (bit for bit, which keeps a candidate's numbers independent of its batch).

**Verified, not trusted.** A compromised tracer can send any bytes, so `load_artifact` checks
the deserialised module before anything compiles it (`check_module`):
- only the `func`, `stablehlo` and `chlo` dialects; no host or device communication
  (send/recv/infeed/outfeed/collectives), no custom calls but JAX's `shape_assertion`, so no
  host callbacks, I/O or foreign kernels;
- no effects, one device, no disabled safety checks, the exact signature the task expects;
- elementwise along `n`: the symbolic size is used only to build shapes (never as a value),
  and no op mixes elements along axis 0 (reductions, gathers, slices, sorts, concatenations,
  transposes, dot products and reshapes are allowed only along the per-element axes).
Measured on the 2-core CPU: exporting a drift takes ~0.1 s and is ~8 KB, verifying it ~5 ms.
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
from jax import export as jax_export
from jax._src.interpreters import mlir  # the context JAX's own MLIR dialects are loaded in
from jax._src.lib.mlir import ir

MAX_ARTIFACT_BYTES = 4 * 2**20  # per variant; a drift is ~8 KB, an optimizer rule ~20 KB
SYMBOL = "n"


class ArtifactRejected(Exception):
    """The artifact is not a program the trainer may run; the message says why."""


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
_DIALECTS = ("func.", "stablehlo.", "chlo.")
_FORBIDDEN = {
    "stablehlo.send",
    "stablehlo.recv",
    "stablehlo.infeed",
    "stablehlo.outfeed",
    "stablehlo.after_all",
    "stablehlo.create_token",
    "stablehlo.all_reduce",
    "stablehlo.all_gather",
    "stablehlo.all_to_all",
    "stablehlo.reduce_scatter",
    "stablehlo.collective_permute",
    "stablehlo.collective_broadcast",
    "stablehlo.partition_id",
    "stablehlo.replica_id",
    "stablehlo.composite",
}
_CUSTOM_CALLS = {"shape_assertion"}
# Ops that, given an operand or result with the symbolic axis, cannot be checked to keep
# elements apart along it: refused in that case (allowed on per-element values).
_REFUSED_ON_AXIS = {
    "stablehlo.slice",
    "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice",
    "stablehlo.reduce_window",
    "stablehlo.select_and_scatter",
    "stablehlo.fft",
    "stablehlo.cholesky",
    "stablehlo.triangular_solve",
    "stablehlo.map",
    "stablehlo.iota",
    "stablehlo.rng",
    "stablehlo.rng_bit_generator",
    "stablehlo.batch_norm_training",
    "stablehlo.batch_norm_inference",
    "stablehlo.batch_norm_grad",
    "stablehlo.dynamic_pad",
    "stablehlo.dynamic_gather",
    "stablehlo.dynamic_conv",
    "stablehlo.convolution",
    "stablehlo.dot",
    "stablehlo.get_tuple_element",
    "stablehlo.tuple",
}
# (op, operand index) where a value computed from the symbolic size may go: shape operands.
_SHAPE_USES = {
    ("stablehlo.dynamic_broadcast_in_dim", 1),
    ("stablehlo.dynamic_reshape", 1),
    ("stablehlo.real_dynamic_slice", 1),
    ("stablehlo.real_dynamic_slice", 2),
    ("stablehlo.real_dynamic_slice", 3),
    ("stablehlo.dynamic_iota", 0),
}
_SHAPE_ARITHMETIC = {
    "stablehlo.reshape",
    "stablehlo.concatenate",
    "stablehlo.convert",
    "stablehlo.compare",
}


def _ints(attribute) -> list[int]:
    """The integers of an attribute such as `array<i64: 0, 1>` (the element type's width is not
    one of them: reading it as a dimension refused every broadcast of a batched operand)."""
    text = re.sub(r"\b[iu]\d+\b", "", str(attribute))
    return [int(x) for x in re.findall(r"-?\d+", text)]


def _named_ints(attribute, name: str) -> list[int]:
    match = re.search(rf"{name}\s*=\s*\[([^\]]*)\]", str(attribute))
    return _ints(match.group(1)) if match else []


class _ModuleCheck:
    """One pass over a parsed module: dialects, custom calls, the symbolic axis."""

    def __init__(self, module, ir):
        self.ir = ir
        self.module = module
        self.dynamic = ir.ShapedType.get_dynamic_size()
        self.functions = {}
        for op in module.body.operations:
            if op.operation.name != "func.func":
                raise ArtifactRejected(f"unexpected top-level operation {op.operation.name}")
            name = str(op.operation.attributes["sym_name"]).strip('"')
            self.functions[name] = op.operation
        self.size_values: set = set()  # SSA values computed from the symbolic size

    # -- helpers -------------------------------------------------------------------------------
    def shape(self, value) -> list[int] | None:
        try:
            return list(self.ir.RankedTensorType(value.type).shape)
        except (ValueError, TypeError):
            return None

    def on_axis(self, value) -> bool:
        shape = self.shape(value)
        if shape is None:
            return False
        if any(d == self.dynamic for d in shape[1:]):
            raise ArtifactRejected("a value has a symbolic size on an axis other than the first")
        return bool(shape) and shape[0] == self.dynamic

    def constant_vector(self, value) -> list:
        """A shape operand as a list of ints and SYMBOL, or [] when it cannot be resolved."""
        owner = value.owner
        if isinstance(owner, self.ir.Block) or owner is None:
            return [SYMBOL] if value in self.size_values else []
        op = owner.operation if hasattr(owner, "operation") else owner
        name = op.name
        if name == "stablehlo.constant":
            return _ints(op.attributes["value"])
        if value in self.size_values and name in ("stablehlo.get_dimension_size",):
            return [SYMBOL]
        if name in ("stablehlo.reshape", "stablehlo.convert"):
            return self.constant_vector(op.operands[0])
        if name == "stablehlo.concatenate":
            out: list = []
            for operand in op.operands:
                part = self.constant_vector(operand)
                if not part:
                    return []
                out += part
            return out
        return []

    # -- the walk ------------------------------------------------------------------------------
    def run(self) -> None:
        for function in self.functions.values():
            block = function.regions[0].blocks[0]
            for index, argument in enumerate(block.arguments):
                attrs = (
                    function.attributes["arg_attrs"] if "arg_attrs" in function.attributes else None
                )
                if attrs is not None and "jax.global_constant" in str(attrs[index]):
                    self.size_values.add(argument)
        # propagate the size through calls until nothing changes
        for _ in range(len(self.functions) + 1):
            before = len(self.size_values)
            for function in self.functions.values():
                self.walk_region(function.regions[0], collect=True)
            if len(self.size_values) == before:
                break
        for function in self.functions.values():
            self.walk_region(function.regions[0], collect=False)

    def walk_region(self, region, collect: bool) -> None:
        for block in region.blocks:
            for op in block.operations:
                self.visit(op.operation, collect)
                for inner in op.operation.regions:
                    self.walk_region(inner, collect)

    def visit(self, op, collect: bool) -> None:
        name = op.name
        if collect:
            self.collect_size(op)
            return
        if not name.startswith(_DIALECTS):
            raise ArtifactRejected(f"operation {name} is not allowed (only func, stablehlo, chlo)")
        if name in _FORBIDDEN:
            raise ArtifactRejected(f"operation {name} is not allowed (no communication or I/O)")
        if name == "stablehlo.custom_call":
            target = str(op.attributes["call_target_name"]).strip('"')
            if target not in _CUSTOM_CALLS:
                raise ArtifactRejected(
                    f"custom call {target!r} is not allowed (no host callbacks or foreign kernels)"
                )
        if name == "func.call":
            callee = str(op.attributes["callee"]).lstrip("@")
            if callee not in self.functions:
                raise ArtifactRejected(f"call to an undefined function {callee!r}")
        self.check_size_uses(op)
        self.check_axis(op)

    def collect_size(self, op) -> None:
        name = op.name
        if name == "stablehlo.get_dimension_size":
            self.size_values.add(op.results[0])
            return
        if name == "func.call":
            callee = self.functions.get(str(op.attributes["callee"]).lstrip("@"))
            if callee is not None:
                arguments = callee.regions[0].blocks[0].arguments
                for operand, argument in zip(op.operands, arguments):
                    if operand in self.size_values:
                        self.size_values.add(argument)
            return
        if name in _SHAPE_ARITHMETIC and any(o in self.size_values for o in op.operands):
            for result in op.results:
                self.size_values.add(result)

    def check_size_uses(self, op) -> None:
        name = op.name
        for index, operand in enumerate(op.operands):
            if operand not in self.size_values:
                continue
            if (name, index) in _SHAPE_USES or name in _SHAPE_ARITHMETIC or name == "func.call":
                continue
            if name == "stablehlo.custom_call":
                continue  # shape_assertion (other targets are refused above)
            raise ArtifactRejected(
                f"the program uses the size of the batch as a value ({name}); a per-element "
                "program may not depend on how many elements are computed"
            )
        if name == "stablehlo.compare" and any(o in self.size_values for o in op.operands):
            for use in op.results[0].uses:
                if use.owner.name != "stablehlo.custom_call":
                    raise ArtifactRejected(
                        "the program compares the size of the batch outside a shape assertion"
                    )

    def check_axis(self, op) -> None:
        name = op.name
        values = list(op.operands) + list(op.results)
        if not any(self.on_axis(v) for v in values):
            return
        attrs = op.attributes
        operand = op.operands[0] if len(op.operands) else None
        operand_on_axis = operand is not None and self.on_axis(operand)
        if name in _REFUSED_ON_AXIS:
            raise ArtifactRejected(f"{name} across the batch axis is not allowed (not elementwise)")
        if name == "stablehlo.reduce":
            if 0 in _named_ints(attrs["dimensions"], "") or 0 in _ints(attrs["dimensions"]):
                raise ArtifactRejected("a reduction over the batch axis (not elementwise)")
        elif name == "stablehlo.transpose":
            if _ints(attrs["permutation"])[:1] != [0]:
                raise ArtifactRejected("a transpose that moves the batch axis (not elementwise)")
        elif name in ("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim"):
            dims = _ints(attrs["broadcast_dimensions"])
            if operand_on_axis and dims[:1] != [0]:
                raise ArtifactRejected("a broadcast that moves the batch axis (not elementwise)")
            if name == "stablehlo.dynamic_broadcast_in_dim" and self.on_axis(op.results[0]):
                if self.constant_vector(op.operands[1])[:1] != [SYMBOL]:
                    raise ArtifactRejected("a broadcast to a batch size other than the input's")
            if (
                name == "stablehlo.broadcast_in_dim"
                and self.on_axis(op.results[0])
                and not operand_on_axis
            ):
                raise ArtifactRejected("a static broadcast to the symbolic batch size")
        elif name in ("stablehlo.reshape", "stablehlo.dynamic_reshape"):
            result = op.results[0]
            in_shape, out_shape = self.shape(operand), self.shape(result)
            if not (operand_on_axis and self.on_axis(result)):
                raise ArtifactRejected("a reshape into or out of the batch axis (not elementwise)")
            if math.prod(in_shape[1:]) != math.prod(out_shape[1:]):
                raise ArtifactRejected("a reshape that merges elements of the batch axis")
            if name == "stablehlo.dynamic_reshape" and self.constant_vector(op.operands[1])[:1] != [
                SYMBOL
            ]:
                raise ArtifactRejected("a reshape to a batch size other than the input's")
        elif name == "stablehlo.real_dynamic_slice":
            start = self.constant_vector(op.operands[1])
            limit = self.constant_vector(op.operands[2])
            stride = self.constant_vector(op.operands[3])
            if start[:1] != [0] or limit[:1] != [SYMBOL] or stride[:1] != [1]:
                raise ArtifactRejected("a slice of the batch axis (not elementwise)")
        elif name == "stablehlo.dynamic_iota":
            if int(str(attrs["iota_dimension"]).split(":")[0]) == 0:
                raise ArtifactRejected("positions along the batch axis (iota; not elementwise)")
        elif name == "stablehlo.concatenate":
            if int(str(attrs["dimension"]).split(":")[0]) == 0:
                raise ArtifactRejected("a concatenation along the batch axis (not elementwise)")
        elif name == "stablehlo.sort":
            if int(str(attrs["dimension"]).split(":")[0]) == 0:
                raise ArtifactRejected("a sort along the batch axis (not elementwise)")
        elif name == "stablehlo.reverse":
            if 0 in _ints(attrs["dimensions"]):
                raise ArtifactRejected("a reversal of the batch axis (not elementwise)")
        elif name == "stablehlo.pad":
            for key in ("edge_padding_low", "edge_padding_high", "interior_padding"):
                if _ints(attrs[key])[:1] != [0]:
                    raise ArtifactRejected("padding along the batch axis (not elementwise)")
        elif name == "stablehlo.dot_general":
            numbers = attrs["dot_dimension_numbers"]
            lhs, rhs = (self.on_axis(v) for v in op.operands[:2])
            # Elementwise either way: the axis is batching dimension 0 of every operand on it,
            # or only the left operand is on it, as a free dimension, with no batching
            # dimensions (each element's row times constant weights; the axis stays first).
            batched = all(
                not on or _named_ints(numbers, f"{side}_batching_dimensions")[:1] == [0]
                for side, on in (("lhs", lhs), ("rhs", rhs))
            )
            free_row = (
                lhs
                and not rhs
                and not _named_ints(numbers, "lhs_batching_dimensions")
                and 0 not in _named_ints(numbers, "lhs_contracting_dimensions")
            )
            if not (batched or free_row):
                raise ArtifactRejected("a product across the batch axis (not elementwise)")
        elif name == "stablehlo.gather":
            numbers = attrs["dimension_numbers"]
            if operand_on_axis and 0 not in _named_ints(numbers, "operand_batching_dims"):
                raise ArtifactRejected("a gather across the batch axis (not elementwise)")
        elif name == "stablehlo.scatter":
            numbers = attrs["scatter_dimension_numbers"]
            batched = 0 in _named_ints(numbers, "input_batching_dims")
            windowed = (
                0 not in _named_ints(numbers, "inserted_window_dims")
                and 0 not in _named_ints(numbers, "scatter_dims_to_operand_dims")
                and len(op.operands) == 3
                and _named_ints(numbers, "update_window_dims")[:1] == [0]
                and self.on_axis(op.operands[2])
            )
            if operand_on_axis and not (batched or windowed):
                raise ArtifactRejected("a scatter across the batch axis (not elementwise)")


def check_module(text: str) -> None:
    """Raise ArtifactRejected unless the StableHLO module is a per-element program (see top)."""
    context = mlir.make_ir_context()
    try:
        module = ir.Module.parse(text, context=context)
    except Exception as error:  # the parser's own error type varies across jaxlib releases
        raise ArtifactRejected(f"the module does not parse: {str(error)[:200]}") from error
    with context:
        _ModuleCheck(module, ir).run()


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


def verify(exported, signature: ElementSignature, platform: str) -> None:
    """Raise ArtifactRejected unless `exported` may run in the trainer."""
    if exported.nr_devices != 1:
        raise ArtifactRejected("the artifact is for more than one device")
    if exported.ordered_effects or exported.unordered_effects:
        raise ArtifactRejected("the artifact has side effects")
    if exported.disabled_safety_checks:
        raise ArtifactRejected("the artifact disables JAX's safety checks")
    if platform not in exported.platforms:
        raise ArtifactRejected(f"the artifact is for {exported.platforms}, not {platform}")
    _check_avals(exported.in_avals, signature.inputs, "input")
    _check_avals(exported.out_avals, signature.outputs, "output")
    check_module(exported.mlir_module())
    if signature.differentiable:
        if not exported.has_vjp():
            raise ArtifactRejected("the artifact has no VJP; the trainer differentiates through it")
        vjp = exported.vjp()
        if (
            vjp.nr_devices != 1
            or vjp.ordered_effects
            or vjp.unordered_effects
            or vjp.disabled_safety_checks
        ):
            raise ArtifactRejected("the artifact's VJP has side effects or disabled checks")
        _check_avals(vjp.in_avals, signature.inputs + signature.outputs, "VJP input")
        _check_avals(vjp.out_avals, signature.inputs, "VJP output")
        check_module(vjp.mlir_module())


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


def callable_from(exported, signature: ElementSignature) -> Callable:
    """A function of arrays shaped (*slots, *P) returning a tuple of outputs, differentiable
    through the artifact's own exported VJP when the signature says so."""
    in_slots = [tuple(s) for s, _ in signature.inputs]
    out_slots = [tuple(s) for s, _ in signature.outputs]
    forward = _elementwise(exported, in_slots, out_slots)
    if not signature.differentiable:
        return forward
    backward = _elementwise(exported.vjp(), in_slots + out_slots, in_slots)

    @jax.custom_vjp
    def function(*args):
        return forward(*args)

    def function_fwd(*args):
        return forward(*args), args

    def function_bwd(primals, cotangents):
        return tuple(backward(*primals, *cotangents))

    function.defvjp(function_fwd, function_bwd)
    return function


def load_variants(
    blobs: dict[str, bytes], signature: ElementSignature, platform: str
) -> dict[str, Callable]:
    """Deserialise and verify every variant; variant name -> callable (see callable_from).

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
        verify(exported, signature, platform)
        out[name] = callable_from(exported, signature)
    return out
