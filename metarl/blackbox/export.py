"""A meta-network as candidate source: the weights as literal arrays, the forward pass in jnp.

Every method's result is scored by the same cascade, so an ES mean or a distilled network
becomes an ordinary `drift` candidate: source the static check accepts and the sandboxed tracer
exports like any other. The source computes exactly what `rl.lpo.lpo_drift` computes (same
features, same operations in the same order), and each weight is printed with the fewest digits
that give back the same float32, so the candidate trains the network it was exported from.

Size: a width-128 network is 1152 weights, ~14 KB of source, under the static check's 20 KB;
wider networks are refused here with the width that fits.
"""

from __future__ import annotations

import ast

import numpy as np

from metarl.errors import MetarlError
from metarl.evaluation.static_check import MAX_AST_NODES, MAX_SOURCE_BYTES
from metarl.rl.lpo import DEAD_ZONE, NUM_FEATURES, MetaParams, from_weights, weights


class ExportError(MetarlError, ValueError):
    """The network cannot be written as candidate source (one line for the user)."""


TEMPLATE = """\
# {title}
# An LPO meta-network (Dense({width}) -> tanh -> Dense(1), no biases) over the 8 LPO features,
# added to PPO-clip's drift through a dead zone of width {dead_zone}: exported by metarl.
def drift(ratio, advantage, epsilon):
    hidden = jnp.array({hidden}, dtype=jnp.float32)
    out = jnp.array({out}, dtype=jnp.float32)
    advantage = jnp.broadcast_to(advantage, jnp.shape(ratio))
    r1 = ratio - 1.0
    log_r = jnp.log(ratio)
    base = jnp.stack([r1, r1 * r1, log_r, log_r * log_r], axis=-1)
    features = jnp.concatenate([base, base * advantage[..., None]], axis=-1)
    net = jnp.tanh(features @ hidden) @ out
    net = jax.nn.relu(net - {dead_zone}) - jax.nn.relu(-net - {dead_zone})
    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)
    return jax.nn.relu(jax.nn.relu((ratio - clipped) * advantage) + net)
"""


def float_literal(value: np.float32) -> str:
    """The shortest decimal that reads back as the same float32 (e.g. `-0.0123`, `1.5e-05`)."""
    text = np.format_float_scientific(value, unique=True, trim="-")
    positional = np.format_float_positional(value, unique=True, trim="-")
    text = positional if len(positional) <= len(text) else text
    if np.float32(float(text)) != value:  # never seen; a float64 parse rounding differently
        text = repr(float(value))
    return text


def array_literal(array: np.ndarray) -> str:
    """A nested list literal of a float32 array."""
    if array.ndim == 1:
        return "[" + ", ".join(float_literal(v) for v in array) + "]"
    return "[" + ", ".join(array_literal(row) for row in array) + "]"


def lpo_source(params: MetaParams, title: str = "LPO meta-network") -> str:
    """Candidate source of the LPO drift with meta-parameters `params`.

    Args:
        params: LPONetwork parameters (rl/lpo.py).
        title: the first comment line (what the network is, e.g. "ES mean, generation 20").

    Returns:
        The source of `drift(ratio, advantage, epsilon)`.

    Raises:
        ExportError: the source would exceed the static check's size limits.
    """
    return network_source(TEMPLATE, params, title, dead_zone=float_literal(np.float32(DEAD_ZONE)))


def network_source(template: str, params: MetaParams, title: str, **fields: str) -> str:
    """`template` filled with the network's weights as literals, its width and title, and
    `fields`; checked against the static check's size limits.

    Raises:
        ExportError: non-finite weights, or source beyond the static check's limits.
    """
    hidden, out = weights(params)
    if not (np.all(np.isfinite(hidden)) and np.all(np.isfinite(out))):
        raise ExportError("the network has non-finite weights; it cannot be exported")
    source = template.format(
        title=" ".join(title.split()),
        width=out.shape[0],
        hidden=array_literal(hidden),
        out=array_literal(out),
        **fields,
    )
    check_export_size(source, hidden, out)
    return source


def check_export_size(source: str, hidden: np.ndarray, out: np.ndarray) -> None:
    """Refuse an export the static check would refuse for its size, naming the width that fits.

    Raises:
        ExportError: the source is over the static check's byte or syntax-node limit.
    """
    size = len(source.encode())
    # a weight costs about 12 bytes and 2 syntax nodes; `rows + 1` weights per hidden unit
    per_unit_nodes = 2.2 * (hidden.shape[0] + 1)
    nodes = per_unit_nodes * out.shape[0] + 300
    if size > MAX_SOURCE_BYTES or nodes > MAX_AST_NODES:
        per_unit = size / max(1, out.shape[0])
        fits = int(
            min((MAX_SOURCE_BYTES - 1500) / per_unit, (MAX_AST_NODES - 300) / per_unit_nodes)
        )
        raise ExportError(
            f"a width-{out.shape[0]} network is {size} bytes of source; the static check "
            f"allows {MAX_SOURCE_BYTES} bytes and {MAX_AST_NODES} syntax nodes (at most "
            f"width {fits} fits)"
        )


def read_lpo_source(source: str) -> MetaParams | None:
    """The network of a source that `lpo_source` wrote, read without executing it (`ast`);
    None when the source is not such an export.

    Args:
        source: candidate source.

    Returns:
        LPONetwork parameters, or None.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    arrays = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("hidden", "out")
            and isinstance(node.value, ast.Call)
            and node.value.args
        ):
            try:
                arrays[node.targets[0].id] = np.asarray(
                    ast.literal_eval(node.value.args[0]), np.float32
                )
            except (ValueError, SyntaxError):
                return None
    hidden, out = arrays.get("hidden"), arrays.get("out")
    if hidden is None or out is None or hidden.ndim != 2 or out.shape != hidden.shape[1:]:
        return None
    if hidden.shape[0] != NUM_FEATURES:
        return None
    return from_weights(hidden, out)
