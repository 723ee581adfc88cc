"""How an elementwise task's candidate crosses from the tracer to the trainer.

Most components are a function of per-sample float arrays plus static Python floats (PPO's
clip range): `drift(ratio, advantage, epsilon)`, `value_loss(value, old_value, target,
epsilon)`. The tracer exports the function on one element, once per value of the static
argument the trainer's configs use (a *variant*, rl/verifier/artifact.py); the trainer assembles the
contract's function from the verified variants. This module builds those three pieces for any
such task, so a task folder keeps only its contract, seeds and probes.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax.numpy as jnp

from metarl.rl.verifier.artifact import ElementSignature


class ElementwisePlumbing(NamedTuple):
    """A Task's `element_signature`, `per_element` and `assemble` (see tasks/base.py)."""

    element_signature: ElementSignature
    per_element: Callable[[Callable], dict[str, Callable]]
    assemble: Callable[[dict[str, Callable]], Callable]


def variant_name(static: float) -> str:
    return f"epsilon={float(static)!r}"


def elementwise_plumbing(
    what: str, arrays: int, statics: tuple[float, ...], differentiable: bool = True
) -> ElementwisePlumbing:
    """The plumbing of `f(*arrays, static) -> array`, elementwise in float32.

    Args:
        what: the function's name, for the trainer's error when a static value has no variant.
        arrays: how many float32 array arguments come before the static one.
        statics: the static values exported (one variant each).
        differentiable: whether the trainer differentiates through it (exports the VJP).

    Returns:
        The signature, `per_element(function)` and `assemble(variants)`; the assembled function
        broadcasts every array argument to the first one's shape.
    """
    signature = ElementSignature(
        inputs=tuple(((), "float32") for _ in range(arrays)),
        outputs=(((), "float32"),),
        differentiable=differentiable,
    )

    def per_element(function: Callable) -> dict[str, Callable]:
        return {variant_name(s): (lambda *elements, s=s: function(*elements, s)) for s in statics}

    def assemble(calls: dict[str, Callable]) -> Callable:
        def assembled(*args):
            *values, static = args
            name = variant_name(static)
            if name not in calls:
                raise ValueError(f"the {what} was exported for {sorted(calls)}, not {name}")
            first = jnp.asarray(values[0], jnp.float32)
            rest = [jnp.broadcast_to(jnp.asarray(v, jnp.float32), first.shape) for v in values[1:]]
            return calls[name](first, *rest)[0]

        return assembled

    return ElementwisePlumbing(signature, per_element, assemble)
