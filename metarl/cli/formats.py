"""How the commands write numbers: scores with their bootstrap intervals, durations, costs.
Pure functions of values; no console, no rich."""

from __future__ import annotations

import math
from typing import Callable


def fmt(value, digits: int = 3) -> str:
    """A number with `digits` decimals; "—" for None and non-finite floats."""
    if value is None:
        return "—"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—"
        return f"{value:.{digits}f}"
    return str(value)


def fmt_p(value) -> str:
    """A p-value or a test's level in 3 significant digits (they reach 1e-5 and below: a race's
    level late in a run); "—" for None."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.3g}"


def fmt_compact(value, digits: int = 3) -> str:
    """Like `fmt`, but large values in `digits` significant digits and "-" for none."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}" if abs(value) >= 1000 else f"{value:.{digits}f}"


def fmt_interval(value, interval, digits: int = 3, number: Callable = fmt) -> str:
    """A score and its 95% bootstrap interval over seeds: "0.93 [0.81, 1.02]" (digits=2); the
    score alone when there is no interval (one seed, or archived before intervals)."""
    if value is None or not interval:
        return number(value, digits)
    low, high = interval
    return f"{number(value, digits)} [{number(low, digits)}, {number(high, digits)}]"


def fmt_published(published: dict | None, digits: int = 2) -> str:
    """Scores normalised against published PPO returns, labelled: "DiscoBench 0.71 · ..."."""
    return " · ".join(f"{label} {fmt(value, digits)}" for label, value in (published or {}).items())


def fmt_seconds(seconds: float | None) -> str:
    """12s, 4m05s, 1h30m; "—" for None."""
    if seconds is None:
        return "—"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def fmt_duration(seconds: float | None) -> str:
    """A duration as `--max-time` reads it: 9m, 1.5h, 90s; "none" for no limit."""
    if seconds is None:
        return "none"
    for unit, scale in (("h", 3600), ("m", 60)):
        if seconds >= scale and seconds % scale == 0:
            return f"{seconds // scale:.0f}{unit}"
    return f"{seconds:g}s"


def fmt_cost(cost: float | None) -> str:
    """An unknown price (a model missing from litellm's offline cost map) reads "unknown"; a
    call that cost nothing (a local model) "$0", never "$0.0000"."""
    if cost is None:
        return "unknown"
    return f"${cost:.4f}" if cost else "$0"
