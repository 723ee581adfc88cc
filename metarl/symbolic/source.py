"""A fitted expression as a drift candidate: source text, and the same function in JAX.

A regression fits some f(log r, r - 1, A) to a drift; nothing makes f itself a legal drift. The
candidate therefore computes

    drift(r, A) = relu(f(log r, r - 1, A) - f(0, 0, A) - MARGIN)

which is >= 0 everywhere, exactly 0 at r = 1 (both f terms are the same computation on the
same inputs there), and flat at r = 1 (relu of -MARGIN has zero slope, and f is continuous, so
the drift is 0 in a neighbourhood of r = 1). Any additive offset of f cancels, so backends need
not fit one.

`candidate_source` writes this with the contract's vocabulary only (jnp, jax.nn), so it passes
the static check like any proposed program; `drift_function` is the same computation as a
Python function over `evaluate`, which the fit uses to score its candidate without executing
generated text. Constants are written as the shortest decimals that read back as the same
float32, so both compute the same numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from metarl.rl.components import DriftFn
from metarl.symbolic.expression import (
    OPERATORS,
    Constant,
    Expression,
    Inputs,
    Variable,
    evaluate,
    format_constant,
    readable,
)

MARGIN = 1e-6  # the drift is relu(f(r) - f(1) - MARGIN): flat while f(r) - f(1) is below it
HELPER = "fitted"  # the name of the candidate's helper that computes f
# the helper's parameter for each variable
PARAMETERS = {"log_r": "log_r", "r1": "r1", "A": "advantage"}


def expression_source(expression: Expression) -> str:
    """`expression` as a jnp expression over the helper's parameters (`log_r`, `r1`,
    `advantage`).

    Raises:
        SymbolicError: a constant is not a finite float32.
    """
    if isinstance(expression, Constant):
        text = format_constant(expression.value)
        return f"({text})" if text.startswith("-") else text
    if isinstance(expression, Variable):
        return PARAMETERS[expression.name]
    return OPERATORS[expression.operator].source(*map(expression_source, expression.args))


def candidate_source(expression: Expression, note: str = "") -> str:
    """The drift candidate of `expression` (see the module docstring), as source text.

    Args:
        expression: the fitted f over log_r, r1 and A.
        note: a line for the header comment (e.g. which backend fitted it).

    Returns:
        Source that defines `drift(ratio, advantage, epsilon)` and a helper, using only `jnp`
        and `jax.nn`; it returns float32 with ratio's shape.

    Raises:
        SymbolicError: a constant is not a finite float32.
    """
    header = [
        "# A symbolic fit of a drift"
        + (f" ({note})" if note else "")
        + ": drift = relu(f(r, A) - f(1, A) - margin),",
        "# exactly 0 and flat at r = 1, with",
        f"#   f = {readable(expression)}",
    ]
    body = [
        f"def {HELPER}(log_r, r1, advantage):",
        f"    return {expression_source(expression)}",
        "",
        "",
        "def drift(ratio, advantage, epsilon):",
        "    log_r = jnp.log(ratio)",
        "    r1 = ratio - 1.0",
        f"    at_one = {HELPER}(jnp.zeros_like(log_r), jnp.zeros_like(r1), advantage)",
        f"    value = jax.nn.relu({HELPER}(log_r, r1, advantage) - at_one - {MARGIN!r})",
        "    return jnp.broadcast_to(value, jnp.shape(ratio)).astype(jnp.float32)",
    ]
    return "\n".join(header + body) + "\n"


def drift_function(expression: Expression) -> DriftFn:
    """The candidate of `expression` as a JAX function: what `candidate_source` computes.

    Args:
        expression: the fitted f over log_r, r1 and A.

    Returns:
        `drift(ratio, advantage, epsilon)`, elementwise, float32 with ratio's shape.
    """

    def drift(ratio: jax.Array, advantage: jax.Array, epsilon: float) -> jax.Array:
        log_r = jnp.log(ratio)
        r1 = ratio - 1.0
        at_one = evaluate(
            expression, Inputs(jnp.zeros_like(log_r), jnp.zeros_like(r1), advantage), jnp
        )
        fitted = evaluate(expression, Inputs(log_r, r1, advantage), jnp)
        value = jax.nn.relu(fitted - at_one - MARGIN)
        return jnp.broadcast_to(value, jnp.shape(ratio)).astype(jnp.float32)

    return drift
