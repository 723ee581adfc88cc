"""Symbolic distillation of drifts: fit a closed form to a drift's samples and turn it into a
candidate program.

Black-box meta-learning (the LPO network, metarl/rl/lpo.py) gives a drift that works but cannot
be read; Goldie et al. (2025) distil such networks into formulas with symbolic regression. This
package does that with pyoperon (PySR optionally), and writes the formula as an ordinary drift
candidate, in the contract's vocabulary, that is exactly 0 and flat at ratio = 1, so it enters
the same evaluation cascade as any proposed program.

    fit = distil_drift(functools.partial(lpo_drift, params), SymbolicSettings(objective="slope"))
    fit.expression, fit.value_error, fit.source
"""

from metarl.symbolic.expression import Expression, SymbolicError, parse, readable
from metarl.symbolic.fit import SymbolicFit, assess, distil_drift, fit_drift
from metarl.symbolic.settings import SymbolicSettings
from metarl.symbolic.source import candidate_source, drift_function

__all__ = [
    "Expression",
    "SymbolicError",
    "SymbolicFit",
    "SymbolicSettings",
    "assess",
    "candidate_source",
    "distil_drift",
    "drift_function",
    "fit_drift",
    "parse",
    "readable",
]
