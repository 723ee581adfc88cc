"""The optional PySR backend (the library of the symbolic distillation in Goldie et al., 2025).

PySR runs SymbolicRegression.jl in Julia; importing it starts a Julia runtime and may install
Julia packages, so it is imported only when this backend is chosen, and its absence is an error
that says so rather than an import failure of the whole package. Its best equation is read back
from the string PySR prints (`parse`), into the same expression tree as pyoperon's models.

Only the "value" objective is offered here: fitting slopes in PySR needs a custom Julia loss
over tree derivatives, which cannot be tested without Julia; the operon backend has it.
"""

from __future__ import annotations

import importlib.util
import logging

import numpy as np

from metarl.symbolic.expression import VARIABLES, Expression, Inputs, SymbolicError, parse
from metarl.symbolic.settings import SymbolicSettings

logger = logging.getLogger(__name__)

# our operator names -> PySR's (aq is defined in Julia; see AQ_JULIA)
BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "fmax": "max", "fmin": "min"}
UNARY = {"square": "square", "tanh": "tanh", "abs": "abs", "exp": "exp", "log": "log",
         "sqrt": "sqrt"}  # fmt: skip
AQ_JULIA = "aq(x, y) = x / sqrt(one(x) + y * y)"


def available() -> bool:
    """Whether PySR can be imported (without importing it: that would start Julia)."""
    return importlib.util.find_spec("pysr") is not None


def search(
    inputs: Inputs, value: np.ndarray, slope: np.ndarray, settings: SymbolicSettings
) -> Expression:
    """Fit f(log_r, r1, A) to drift values with PySR.

    Args:
        inputs: the samples' features.
        value: the drift at the samples (the target).
        slope: d drift / d ratio (unused: only the "value" objective is offered).
        settings: operators, limits and budget.

    Returns:
        PySR's best equation as an expression.

    Raises:
        SymbolicError: PySR is not installed, the slope objective was asked for, or PySR's
            equation cannot be read.
    """
    if settings.objective != "value":
        raise SymbolicError(
            f"the PySR backend fits drift values only; use backend='operon' for the "
            f"{settings.objective!r} objective"
        )
    try:
        # imported here: PySR is optional and importing it starts Julia (see module docstring)
        import sympy
        from pysr import PySRRegressor
    except ImportError as error:
        raise SymbolicError(
            "PySR is not installed (`pip install pysr`; it also needs Julia); use "
            "backend='operon' instead"
        ) from error

    binary = [BINARY[name] for name in settings.operators if name in BINARY]
    if "aq" in settings.operators:
        binary.append(AQ_JULIA)
    model = PySRRegressor(
        binary_operators=binary,
        unary_operators=[UNARY[name] for name in settings.operators if name in UNARY],
        extra_sympy_mappings={"aq": lambda x, y: x / sympy.sqrt(1 + y**2)},
        maxsize=settings.max_length,
        maxdepth=settings.max_depth,
        niterations=settings.generations,
        population_size=settings.population_size,
        timeout_in_seconds=settings.max_time_s,
        random_state=settings.rng_seed,
        deterministic=True,
        parallelism="serial",
        progress=False,
        verbosity=0,
    )
    model.fit(
        inputs.columns().astype(np.float64),
        np.asarray(value, np.float64),
        variable_names=list(VARIABLES),
    )
    equation = str(model.get_best()["equation"])
    logger.info("PySR: best equation %s", equation)
    return parse(equation)
