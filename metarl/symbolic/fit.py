"""Symbolic distillation: fit a closed form to a drift's samples and make it a candidate.

A meta-learned drift (the LPO network, or any program) is opaque; a short formula that behaves
like it can be read, compared and handed to the proposer as an ordinary candidate. `fit_drift`
runs a symbolic regression (pyoperon by default, PySR optionally) on the drift's samples over
the features log r, r - 1 and A, then turns the best expression into candidate source
(source.py: zero and flat at r = 1 by construction) and scores *that candidate*, not the raw
regression: its value and slope errors are measured on the samples with JAX, exactly as the
trainer would compute the drift.

A fit that is not finite (an overflowing constant, a log of a negative number...) is refused
with a SymbolicError naming where, on the sampling grid and on the range the probes check
(ratio in [0.05, 20]), rather than returned as a candidate that fails later.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import numpy as np

from metarl.evaluation.static_check import check_task_source
from metarl.rl.components import DriftFn
from metarl.rl.lpo import DriftGrid, DriftSamples, drift_grid, sample_drift
from metarl.symbolic import operon, pysr_backend
from metarl.symbolic.expression import (
    Expression,
    Inputs,
    SymbolicError,
    depth,
    readable,
    size,
)
from metarl.symbolic.settings import SymbolicSettings
from metarl.symbolic.source import candidate_source, drift_function
from metarl.tasks import get_task

logger = logging.getLogger(__name__)

SEARCHES = {"operon": operon.search, "pysr": pysr_backend.search}
EPSILON = 0.2  # passed to drifts that are sampled; the fitted candidate ignores it
# where the candidate must be finite besides the samples: the probes' ratio range (with
# r = 1 itself) times advantages beyond the normalised ones
CHECK_RATIOS = np.concatenate([np.geomspace(0.05, 20.0, 64), [1.0]]).astype(np.float32)
CHECK_ADVANTAGES = np.linspace(-8.0, 8.0, 33, dtype=np.float32)


@dataclass(frozen=True)
class SymbolicFit:
    """A fitted expression and the drift candidate made from it.

    Attributes:
        expression: f as a readable formula over log_r (= log ratio), r1 (= ratio - 1) and A
            (the advantage); the candidate is relu(f(r, A) - f(1, A) - 1e-6).
        size: the nodes of f (a weighted variable `w * x` counts three).
        depth: the depth of f.
        value_error: the mean squared error of the candidate's drift against the samples.
        slope_error: the mean squared error of its d drift / d ratio against the samples'.
        source: the candidate's source (defines `drift(ratio, advantage, epsilon)`).
        tree: f as an expression tree.
        backend: the backend that fitted it.
        objective: what the search fitted ("value" or "slope").
        seconds: the wall time of the search.
    """

    expression: str
    size: int
    depth: int
    value_error: float
    slope_error: float
    source: str
    tree: Expression
    backend: str = ""
    objective: str = ""
    seconds: float = 0.0


def subsample(samples: DriftSamples, count: int, rng_seed: int) -> DriftSamples:
    """At most `count` of the samples, drawn without replacement (all of them if fewer).

    Args:
        samples: the samples.
        count: how many to keep.
        rng_seed: seeds the draw.

    Returns:
        The kept samples, in their original order.
    """
    total = len(samples.ratio)
    if total <= count:
        return samples
    keep = np.sort(np.random.default_rng(rng_seed).choice(total, count, replace=False))
    return DriftSamples(*(np.asarray(field)[keep] for field in samples))


def _first_nonfinite(samples: DriftSamples) -> str | None:
    for name in ("value", "slope"):
        values = getattr(samples, name)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            index = bad[0]
            return (
                f"its {name} is {values[index]} at ratio={samples.ratio[index]:.4g}, "
                f"advantage={samples.advantage[index]:.4g} ({bad.size} points)"
            )
    return None


def check_finite(drift: DriftFn, samples: DriftSamples, formula: str) -> None:
    """Refuse a candidate drift that is not finite, with its slope, on the samples and on the
    probes' range.

    Args:
        drift: the candidate as a JAX function.
        samples: the samples' points (checked besides CHECK_RATIOS x CHECK_ADVANTAGES).
        formula: the readable expression, for the message.

    Raises:
        SymbolicError: a value or a slope is NaN or infinite; the message names a point.
    """
    r, a = np.meshgrid(CHECK_RATIOS, CHECK_ADVANTAGES, indexing="ij")
    grids = {
        "the samples": DriftGrid(samples.ratio, samples.advantage),
        "the probes' range": DriftGrid(r.ravel(), a.ravel()),
    }
    for where, grid in grids.items():
        problem = _first_nonfinite(sample_drift(drift, grid, EPSILON))
        if problem is not None:
            raise SymbolicError(f"the fit f = {formula} is not finite on {where}: {problem}")


def assess(
    tree: Expression,
    samples: DriftSamples,
    note: str = "",
) -> SymbolicFit:
    """The candidate of an expression, checked and scored against drift samples.

    Args:
        tree: f over log_r, r1 and A.
        samples: the drift's samples (values and slopes).
        note: a word for the source's header comment (e.g. the backend).

    Returns:
        The fit, with the candidate's errors (backend, objective and seconds left empty).

    Raises:
        SymbolicError: the candidate is not finite somewhere, has a constant that is not a
            finite float32, or does not pass the static check.
    """
    formula = readable(tree)
    source = candidate_source(tree, note)
    static = check_task_source(source, get_task("drift"))
    if not static.ok:
        raise SymbolicError(
            f"the candidate of f = {formula} fails the static check: {static.reason}"
        )
    drift = drift_function(tree)
    check_finite(drift, samples, formula)
    fitted = sample_drift(drift, DriftGrid(samples.ratio, samples.advantage), EPSILON)
    return SymbolicFit(
        expression=formula,
        size=size(tree),
        depth=depth(tree),
        value_error=float(np.mean(np.square(fitted.value.astype(np.float64) - samples.value))),
        slope_error=float(np.mean(np.square(fitted.slope.astype(np.float64) - samples.slope))),
        source=source,
        tree=tree,
    )


def fit_drift(samples: DriftSamples, settings: SymbolicSettings | None = None) -> SymbolicFit:
    """Fit a closed form to a drift's samples and make it a candidate.

    Args:
        samples: the drift's values and slopes (e.g. `sample_drift(drift, drift_grid(64))`);
            at most `settings.max_samples` of them enter the regression.
        settings: the backend, objective, operators and budget (defaults: SymbolicSettings()).

    Returns:
        The fit; its errors are the candidate's, on all the samples.

    Raises:
        SymbolicError: the samples are not finite, the backend cannot run, or its expression
            cannot be a finite candidate.
    """
    settings = settings or SymbolicSettings()
    problem = _first_nonfinite(samples)
    if problem is not None:
        raise SymbolicError(f"the drift to fit is not finite: {problem}")
    used = subsample(samples, settings.max_samples, settings.rng_seed)
    started = time.monotonic()
    tree = SEARCHES[settings.backend](
        Inputs.of(used.ratio, used.advantage), used.value, used.slope, settings
    )
    seconds = time.monotonic() - started
    fit = assess(tree, samples, note=f"{settings.backend}, {settings.objective} objective")
    logger.info(
        "symbolic fit (%s, %s) in %.1f s: f = %s; value MSE %.3g, slope MSE %.3g",
        settings.backend,
        settings.objective,
        seconds,
        fit.expression,
        fit.value_error,
        fit.slope_error,
    )
    return replace(fit, backend=settings.backend, objective=settings.objective, seconds=seconds)


def distil_drift(
    drift: DriftFn, settings: SymbolicSettings | None = None, epsilon: float = EPSILON
) -> SymbolicFit:
    """Sample a drift on the distillation grid (`drift_grid(settings.points)`) and fit it.

    Args:
        drift: `drift(ratio, advantage, epsilon)`, e.g. `functools.partial(lpo_drift, params)`.
        settings: as for `fit_drift`.
        epsilon: the clip range passed to `drift`.

    Returns:
        The fit, as `fit_drift` returns it.

    Raises:
        SymbolicError: as `fit_drift`.
    """
    settings = settings or SymbolicSettings()
    return fit_drift(sample_drift(drift, drift_grid(settings.points), epsilon), settings)
