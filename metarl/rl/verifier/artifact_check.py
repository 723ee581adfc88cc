"""The structural check of an exported artifact's StableHLO: a per-element program, or refused.

Why: a compromised tracer can send any module, and the trainer compiles what it is sent. The
checks here run on the parsed module before anything compiles it (artifact.py's `verify`):

- only the `func`, `stablehlo` and `chlo` dialects; no host or device communication
  (send/recv/infeed/outfeed/collectives), no custom calls but JAX's result-less
  `shape_assertion` (no host callbacks, I/O or foreign kernels), no random-number ops
  (`rng`, `rng_bit_generator`: anywhere, not only on the batch axis), no unranked tensors;
- the symbolic size `n` is used only to build shapes (never as a value);
- **rows stay rows** (the structural rule): a value computed from a value on the batch axis
  is itself on the batch axis. Every op with an operand on the axis must have all its results
  on it, which refuses in one rule every way of folding rows into a value off the axis: a
  scatter into a fixed-size buffer, a gather at a fixed batch position, a dot/einsum that
  contracts over the batch, a reduction, a top-k over the batch. The exceptions are
  `get_dimension_size` (the size, which may only become a shape), `func.call` (the callee is
  checked) and `while` (each result mirrors its own operand; the regions are checked).
  Regions (while/case/reduce/sort bodies) are walked with the same rules;
- **rows stay aligned**: an op with a result on the axis may take, besides operands on the
  axis, only scalars (a static operand of size 64 is shape-compatible with `n` and would give
  row i its i-th element when n = 64), except the structured ops checked one by one below
  (weights of a dot product, a gather's table, a broadcast of a size-1 value);
- ops that keep values on the axis but could still move or mix rows (sort, reverse,
  concatenation, padding, transposes, reshapes, broadcasts, slices, gathers, scatters and
  products) are allowed only when they act along the per-element axes.

Measured on the 2-core CPU: 5-20 ms per module (a drift and its VJP: ~20 ms); every seed program,
an LPO network and an OPEN-lite export, and symbolic drifts pass.
"""

from __future__ import annotations

import math
import re

from jax._src.interpreters import mlir  # the context JAX's own MLIR dialects are loaded in
from jax._src.lib.mlir import ir

SYMBOL = "n"


class ArtifactRejected(Exception):
    """The artifact is not a program the trainer may run; the message says why."""


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
_RANDOM = {"stablehlo.rng", "stablehlo.rng_bit_generator"}
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
# Ops exempt from "rows stay rows": their results are checked another way (see the top).
_ROWS_EXEMPT = {"stablehlo.get_dimension_size", "func.call", "stablehlo.while"}
# Ops whose operands off the axis are checked op by op in `check_axis` (shape vectors, weights,
# tables, padding values, loop state, call arguments) rather than by "rows stay aligned".
_STRUCTURED = {
    "stablehlo.dynamic_broadcast_in_dim",
    "stablehlo.dynamic_reshape",
    "stablehlo.real_dynamic_slice",
    "stablehlo.dynamic_iota",
    "stablehlo.dot_general",
    "stablehlo.gather",
    "stablehlo.scatter",
    "stablehlo.pad",
    "stablehlo.while",
    "stablehlo.case",
    "stablehlo.if",
    "func.call",
    "stablehlo.custom_call",
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
    """The list `name = [..]` inside a structured attribute (e.g. dot dimension numbers)."""
    match = re.search(rf"\b{name}\s*=\s*\[([^\]]*)\]", str(attribute))
    return _ints(match.group(1)) if match else []


def _named_int(attribute, name: str) -> int | None:
    """The scalar `name = k` inside a structured attribute (None when absent: MLIR omits a
    default, e.g. a gather's index_vector_dim of 0)."""
    match = re.search(rf"\b{name}\s*=\s*(-?\d+)", str(attribute))
    return int(match.group(1)) if match else None


def _paired(first: list[int], second: list[int], dimension: int) -> int | None:
    """The entry of `second` paired with `dimension` of `first` (batching dimension lists)."""
    if dimension not in first or len(first) != len(second):
        return None
    return second[first.index(dimension)]


class _ModuleCheck:
    """One pass over a parsed module: dialects, custom calls, the symbolic axis."""

    def __init__(self, module):
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
        """The value's shape; None for a non-tensor (refused for an unranked tensor)."""
        if isinstance(value.type, ir.UnrankedTensorType):
            raise ArtifactRejected("an unranked tensor (the batch axis cannot be followed)")
        try:
            return list(ir.RankedTensorType(value.type).shape)
        except (ValueError, TypeError):
            return None

    def on_axis(self, value) -> bool:
        """Whether the value has the symbolic batch axis (always its first axis)."""
        shape = self.shape(value)
        if shape is None:
            return False
        if any(d == self.dynamic for d in shape[1:]):
            raise ArtifactRejected("a value has a symbolic size on an axis other than the first")
        return bool(shape) and shape[0] == self.dynamic

    def scalar(self, value) -> bool:
        """Whether the value is a rank-0 tensor."""
        return self.shape(value) == []

    def constant_vector(self, value) -> list:
        """A shape operand as a list of ints and SYMBOL, or [] when it cannot be resolved."""
        owner = value.owner
        if isinstance(owner, ir.Block) or owner is None:
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
        if name in _RANDOM:
            raise ArtifactRejected(
                f"operation {name} is not allowed (random numbers: a drift or update rule must "
                "be a deterministic function of its inputs)"
            )
        if name == "stablehlo.custom_call":
            target = str(op.attributes["call_target_name"]).strip('"')
            if target not in _CUSTOM_CALLS:
                raise ArtifactRejected(
                    f"custom call {target!r} is not allowed (no host callbacks or foreign kernels)"
                )
            if len(op.results):
                raise ArtifactRejected("a shape assertion with results is not allowed")
        if name == "func.call":
            callee = str(op.attributes["callee"]).lstrip("@")
            if callee not in self.functions:
                raise ArtifactRejected(f"call to an undefined function {callee!r}")
        self.check_size_uses(op)
        self.check_axis(op)  # the specific reasons first, then the general rules
        self.check_rows_stay_rows(op)
        self.check_rows_stay_aligned(op)

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

    def check_rows_stay_rows(self, op) -> None:
        """Refuse an op that computes a value off the batch axis from a value on it."""
        name = op.name
        if name in _ROWS_EXEMPT or not any(self.on_axis(v) for v in op.operands):
            return
        if all(self.on_axis(r) for r in op.results):
            return
        raise ArtifactRejected(
            f"{name} computes a value off the batch axis from values on it (a reduction, a "
            "fixed-size buffer, a product over the batch or a fixed batch position): every value "
            "computed from a sample must stay that sample's (not elementwise)"
        )

    def check_rows_stay_aligned(self, op) -> None:
        """Refuse an op whose result is on the axis and that takes a static non-scalar operand."""
        if op.name in _STRUCTURED or not any(self.on_axis(r) for r in op.results):
            return
        for operand in op.operands:
            if not (self.on_axis(operand) or self.scalar(operand)):
                raise ArtifactRejected(
                    f"{op.name} combines values on the batch axis with a fixed-size array (its "
                    "elements would be matched to positions in the batch; not elementwise)"
                )

    def check_axis(self, op) -> None:
        name = op.name
        values = list(op.operands) + list(op.results)
        if not any(self.on_axis(v) for v in values):
            return
        attrs = op.attributes
        operand = op.operands[0] if len(op.operands) else None
        operand_on_axis = operand is not None and self.on_axis(operand)
        result_on_axis = len(op.results) > 0 and self.on_axis(op.results[0])
        if name in _REFUSED_ON_AXIS:
            raise ArtifactRejected(f"{name} across the batch axis is not allowed (not elementwise)")
        if name == "stablehlo.reduce":
            if 0 in _named_ints(attrs["dimensions"], "") or 0 in _ints(attrs["dimensions"]):
                raise ArtifactRejected("a reduction over the batch axis (not elementwise)")
        elif name == "stablehlo.transpose":
            if _ints(attrs["permutation"])[:1] != [0]:
                raise ArtifactRejected("a transpose that moves the batch axis (not elementwise)")
        elif name in ("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim"):
            self.check_broadcast(op, operand_on_axis, result_on_axis)
        elif name in ("stablehlo.reshape", "stablehlo.dynamic_reshape"):
            result = op.results[0]
            in_shape, out_shape = self.shape(operand), self.shape(result)
            if not (operand_on_axis and result_on_axis):
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
            if (
                not operand_on_axis
                or start[:1] != [0]
                or limit[:1] != [SYMBOL]
                or stride[:1] != [1]
            ):
                raise ArtifactRejected("a slice of the batch axis (not elementwise)")
        elif name == "stablehlo.dynamic_iota":
            if int(str(attrs["iota_dimension"]).split(":")[0]) == 0:
                raise ArtifactRejected("positions along the batch axis (iota; not elementwise)")
            if self.constant_vector(op.operands[0])[:1] != [SYMBOL]:
                raise ArtifactRejected("an iota of a batch size other than the input's")
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
            if not self.scalar(op.operands[1]):
                raise ArtifactRejected("a padding value that is not a scalar")
        elif name == "stablehlo.dot_general":
            self.check_dot(op)
        elif name == "stablehlo.gather":
            self.check_gather(op, operand_on_axis)
        elif name == "stablehlo.scatter":
            self.check_scatter(op, operand_on_axis)

    def check_broadcast(self, op, operand_on_axis: bool, result_on_axis: bool) -> None:
        """A broadcast keeps the batch axis first and never spreads a fixed array along it."""
        name = op.name
        dims = _ints(op.attributes["broadcast_dimensions"])
        if operand_on_axis and dims[:1] != [0]:
            raise ArtifactRejected("a broadcast that moves the batch axis (not elementwise)")
        if name == "stablehlo.broadcast_in_dim":
            if result_on_axis and not operand_on_axis:
                raise ArtifactRejected("a static broadcast to the symbolic batch size")
            return
        if result_on_axis and self.constant_vector(op.operands[1])[:1] != [SYMBOL]:
            raise ArtifactRejected("a broadcast to a batch size other than the input's")
        if result_on_axis and not operand_on_axis and 0 in dims:
            shape = self.shape(op.operands[0]) or []
            if shape[dims.index(0)] != 1:
                raise ArtifactRejected(
                    "a broadcast of a fixed-size array along the batch axis (each sample would "
                    "get the element at its position; not elementwise)"
                )

    def check_dot(self, op) -> None:
        """Elementwise either way: the axis is batching dimension 0 of both operands, or only
        the left operand is on it, as a free dimension, with no batching dimensions (each
        element's row times constant weights; the axis stays first)."""
        numbers = op.attributes["dot_dimension_numbers"]
        lhs, rhs = (self.on_axis(v) for v in op.operands[:2])
        batched = (
            lhs
            and rhs
            and _named_ints(numbers, "lhs_batching_dimensions")[:1] == [0]
            and _named_ints(numbers, "rhs_batching_dimensions")[:1] == [0]
        )
        free_row = (
            lhs
            and not rhs
            and not _named_ints(numbers, "lhs_batching_dimensions")
            and 0 not in _named_ints(numbers, "lhs_contracting_dimensions")
        )
        if not (batched or free_row):
            raise ArtifactRejected("a product across the batch axis (not elementwise)")

    def check_gather(self, op, operand_on_axis: bool) -> None:
        """A gather reads its own sample's row (batching dims), or a fixed table at indices
        that are the samples' own values."""
        numbers = op.attributes["dimension_numbers"]
        indices_on_axis = self.on_axis(op.operands[1])
        if 0 in _named_ints(numbers, "offset_dims"):
            raise ArtifactRejected("a gather that puts a slice on the batch axis")
        if not operand_on_axis:
            return  # a table lookup: the result's rows are the indices' rows
        paired = _paired(
            _named_ints(numbers, "operand_batching_dims"),
            _named_ints(numbers, "start_indices_batching_dims"),
            0,
        )
        if (
            paired != 0
            or not indices_on_axis
            or (_named_int(numbers, "index_vector_dim") or 0) == 0
        ):
            raise ArtifactRejected("a gather across the batch axis (not elementwise)")

    def check_scatter(self, op, operand_on_axis: bool) -> None:
        """A scatter writes into its own sample's row (batching dims), or writes whole windows
        of the batch axis at fixed positions of the per-element axes."""
        numbers = op.attributes["scatter_dimension_numbers"]
        if len(op.operands) != 3:
            raise ArtifactRejected("a scatter of several operands is not allowed on the batch axis")
        indices_on_axis, updates_on_axis = (self.on_axis(v) for v in op.operands[1:])
        batched = (
            _paired(
                _named_ints(numbers, "input_batching_dims"),
                _named_ints(numbers, "scatter_indices_batching_dims"),
                0,
            )
            == 0
            and indices_on_axis
            and updates_on_axis
        )
        windowed = (
            0 not in _named_ints(numbers, "inserted_window_dims")
            and 0 not in _named_ints(numbers, "scatter_dims_to_operand_dims")
            and 0 not in _named_ints(numbers, "input_batching_dims")
            and _named_ints(numbers, "update_window_dims")[:1] == [0]
            and updates_on_axis
            and not indices_on_axis
        )
        if not operand_on_axis or not (batched or windowed):
            raise ArtifactRejected("a scatter across the batch axis (not elementwise)")


def check_module(text: str) -> None:
    """Raise ArtifactRejected unless the StableHLO module is a per-element program (see top).

    Args:
        text: the module's textual StableHLO (`Exported.mlir_module()`).

    Raises:
        ArtifactRejected: with the first reason found.
    """
    context = mlir.make_ir_context()
    try:
        module = ir.Module.parse(text, context=context)
    except Exception as error:  # the parser's own error type varies across jaxlib releases
        raise ArtifactRejected(f"the module does not parse: {str(error)[:200]}") from error
    with context:
        _ModuleCheck(module).run()
