"""The settings of a symbolic fit, shared by every backend.

The defaults stay close to the PySR setting of the symbolic distillation in Goldie et al. (2025,
"How Should We Meta-Learn Reinforcement Learning Algorithms?"): arithmetic, max/min, square,
tanh and abs, over expressions of at most 40 nodes; the search is scaled down so that a fit runs
on a CPU in about a minute. Division is the analytic quotient (`aq(a, b) = a / sqrt(1 + b^2)`)
rather than `/`: a fitted `x / (r - 1)` would put a pole, and a NaN gradient, at r = 1, where
every drift is evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass

from metarl.symbolic.expression import OPERATORS

OBJECTIVES = ("value", "slope")
BACKENDS = ("operon", "pysr")


@dataclass(frozen=True)
class SymbolicSettings:
    """How to fit a closed form to drift samples.

    Attributes:
        backend: "operon" (pyoperon, the default) or "pysr" (optional; needs PySR and Julia).
        operators: the operators the search may use (keys of expression.OPERATORS; constants
            and the variables log_r, r1, A are always available).
        objective: "value" fits the drift's values; "slope" fits d drift / d ratio, the
            quantity that enters the policy gradient (the paper's `--grad-loss`).
        max_length: the most nodes an expression may have.
        max_depth: the deepest an expression may be.
        population_size: individuals per generation.
        generations: the most generations.
        max_evaluations: the most fitness evaluations.
        local_iterations: Levenberg-Marquardt iterations that tune each offspring's constants.
        points: the sampling grid's size per axis (`drift_grid(points)`) for `distil_drift`.
        max_samples: at most this many samples enter the regression (a random subset).
        rng_seed: seeds the subsample and the search.
        max_time_s: the search stops after this many seconds.
        n_threads: threads for the search.
        slope_step: the step in log r of the central differences that measure slopes during
            the "slope" search (the reported slope error is exact: JAX gradients).
    """

    backend: str = "operon"
    operators: tuple[str, ...] = (
        "add",
        "sub",
        "mul",
        "aq",
        "fmax",
        "fmin",
        "square",
        "tanh",
        "abs",
    )
    objective: str = "value"
    max_length: int = 40
    max_depth: int = 8
    population_size: int = 500
    generations: int = 100
    max_evaluations: int = 1_000_000
    local_iterations: int = 5
    points: int = 64
    max_samples: int = 4096
    rng_seed: int = 0
    max_time_s: int = 60
    n_threads: int = 1
    slope_step: float = 1e-2

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {self.backend!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, not {self.objective!r}")
        unknown = [name for name in self.operators if name not in OPERATORS]
        if unknown:
            raise ValueError(f"unknown operators {unknown}; known: {', '.join(OPERATORS)}")
        positive = {
            "max_length": self.max_length,
            "max_depth": self.max_depth,
            "population_size": self.population_size,
            "generations": self.generations,
            "max_evaluations": self.max_evaluations,
            "points": self.points,
            "max_samples": self.max_samples,
            "max_time_s": self.max_time_s,
            "n_threads": self.n_threads,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        if self.local_iterations < 0:
            raise ValueError(f"local_iterations must be >= 0, not {self.local_iterations}")
        if not 0.0 < self.slope_step < 0.5:
            raise ValueError(f"slope_step must be in (0, 0.5), not {self.slope_step}")
