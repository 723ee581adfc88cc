"""What a candidate may use: the one list that the static check, the candidate namespace, the
contract text and the mutation operators all read.

A candidate is a pure JAX function: it gets these modules under these names, may import only
these modules, and may call only these builtins. Changing the vocabulary is changing this file.
"""

from __future__ import annotations

# local name -> module: what the candidate namespace provides without an import
PROVIDED_MODULES = {
    "jax": "jax",
    "jnp": "jax.numpy",
    "lax": "jax.lax",
    "nn": "jax.nn",
    "math": "math",
}

# modules a candidate may import (`import jax.numpy as jnp`, `from jax import lax, nn`)
ALLOWED_MODULES = ("jax", "jax.numpy", "jax.nn", "jax.lax", "math")

# builtins a candidate may call (the tracer adds `print`, whose output is captured)
BUILTINS = (
    "abs", "all", "any", "bool", "dict", "enumerate", "float", "int", "isinstance", "len",
    "list", "max", "min", "pow", "range", "reversed", "round", "slice", "sorted", "sum",
    "tuple", "zip", "True", "False", "None", "ValueError", "TypeError", "ArithmeticError",
)  # fmt: skip

# the sentence the contracts (the text the proposer reads) use to say so
AVAILABLE = """\
Available names: `jax`, `jnp` (jax.numpy), `lax` (jax.lax), `nn` (jax.nn) and `math`; you may
also `import jax`, `import jax.numpy as jnp`, `from jax import lax, nn`, `import math`.
Nothing else can be imported."""
