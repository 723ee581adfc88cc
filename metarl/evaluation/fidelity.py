"""Multi-fidelity evaluation: rungs at which a candidate that is clearly losing stops training.

A *rung* is a fraction of a training environment's run (its budget of PPO updates). At each
rung every live candidate is compared with the task's baseline trained on the same training
seeds to the same update (the baseline cache holds that segment, so the comparison costs the
candidate nothing but the scoring). A candidate clearly below `RUNG_BAR` of the baseline's
progress over a random policy (a one-sided paired t-test over the seeds) stops there; the
others continue their run from where they are (the segment design resumes a run, nothing is
retrained). A score's window is the run's last 10% wherever the run is cut (rl/ppo.py), so a
candidate that passes every rung has exactly the scores it would have had without them
(`fidelity="full"`; tests/test_fidelity.py).

Why paired against the baseline: the training seeds are shared, so seed i of the candidate and
seed i of the baseline start from the same environment keys and network initialisation; their
difference removes most of the seed-to-seed spread that makes a 4-seed mean so noisy.

Why a rung at 1/3 and not 1/9 by default: on the demo's own curves (benchmarks/
rung_correlation.py, RESULTS.md) the ranking at 1/9 of the budget was negatively correlated
with the final one in six of eight rows, while from 1/3 on the eventual best stayed in the top
half in seven of eight.

The rule's error: a candidate that is not below the bar at the rung stops with probability at
most 1 - `confidence` per rung (a one-sided paired t-test; approximate, as the
returns are not normal), so a run with R rungs per candidate wrongly stops an even candidate
with probability at most R * (1 - confidence).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

FIDELITIES = ("rungs", "full")
DISCOVERY_RUNGS = (1 / 3,)  # fractions of each training env's run; see the module docstring
RUNG_CONFIDENCE = 0.95
RUNG_STOP = "rung "  # how a rung's reason starts (the archive never shares such a verdict)
# a candidate stops when clearly below this fraction of the baseline's progress over a random
# policy at the rung; 1.0 (clearly worse than the baseline) stopped the eventual best of a
# smoke generation at 1/3 (benchmarks/fidelity.py, RESULTS.md): early speed is not the score
RUNG_BAR = 0.5


def validate_rungs(rungs: Sequence[float]) -> None:
    """Refuse rungs outside (0, 1).

    Raises:
        ValueError: one line naming the bad rung.
    """
    for rung in rungs:
        if not (isinstance(rung, int | float) and 0.0 < float(rung) < 1.0):
            raise ValueError(f"a rung is a fraction of the budget in (0, 1), not {rung!r}")


def rung_updates(rung: float, num_updates: int) -> int | None:
    """The update a rung stops at in a run of `num_updates` updates: the nearest whole update,
    at least 1; None when that is the whole run (no decision left to make early)."""
    updates = max(1, int(round(float(rung) * num_updates)))
    return updates if updates < num_updates else None


def paired_upper_bound(
    returns: Sequence[float], bars: Sequence[float], confidence: float
) -> float | None:
    """The one-sided upper confidence bound of the mean paired difference returns - bars.

    Args:
        returns: the candidate's return per training seed.
        bars: what each seed's return is compared with (same seeds, same order).
        confidence: e.g. 0.95.

    Returns:
        The bound; None with fewer than two seeds or a non-finite value (nothing is clear).
    """
    from scipy.stats import t as student_t  # lazy: settings (read by `metarl --help`) import us

    a = np.asarray(returns, dtype=np.float64)
    b = np.asarray(bars, dtype=np.float64)
    if a.size < 2 or a.size != b.size or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    diff = a - b
    spread = float(diff.std(ddof=1)) / math.sqrt(diff.size)
    return float(diff.mean() + student_t.ppf(confidence, diff.size - 1) * spread)


def rung_bars(baseline_returns: Sequence[float], random_mean: float, bar: float) -> list[float]:
    """Per seed, the return `bar` of the way from a random policy to the baseline's on that
    seed (1: the baseline itself; 0.5: half its progress)."""
    return [random_mean + bar * (float(b) - random_mean) for b in baseline_returns]


def rung_reason(
    env: str,
    steps: int,
    rung: float,
    returns: Sequence[float],
    baseline_returns: Sequence[float],
    random_mean: float,
    bar: float,
    confidence: float,
    baseline_name: str,
) -> str | None:
    """Why a candidate stops at a rung, with the numbers that decided it; None when it goes on.

    Args:
        env: the environment.
        steps: environment steps trained by the rung.
        rung: the rung as a fraction of the run.
        returns: the candidate's return per training seed at the rung.
        baseline_returns: the baseline's, same seeds and update.
        random_mean: a random policy's mean return on the env.
        bar: the fraction of the baseline's progress over a random policy a candidate must not
            be clearly below (`rung_bars`).
        confidence: the one-sided confidence of "clearly below".
        baseline_name: the task's baseline, for the message.

    Returns:
        The reason, or None when the candidate is not clearly below the bar (or no test is
        possible).
    """
    bound = paired_upper_bound(returns, rung_bars(baseline_returns, random_mean, bar), confidence)
    if bound is None or bound >= 0.0:
        return None
    mean = float(np.mean(returns))
    base = float(np.mean(baseline_returns))
    return (
        f"{RUNG_STOP}{rung:.3g} of the budget on {env} ({steps} steps): mean return "
        f"{mean:.4g} against {baseline_name}'s {base:.4g} on the same {len(returns)} seeds "
        f"(random policy {random_mean:.4g}); the {confidence:.0%} upper bound of its paired "
        f"margin over {bar:g} of {baseline_name}'s progress is {bound:.4g} < 0 (clearly "
        "below); stopped"
    )
