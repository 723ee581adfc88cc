"""One candidate's training split over idle trainer slots, by environment, and merged back.

A batch is split into the executor's slots by candidate (BatchTraining.train_shares), so a
batch of one candidate leaves every slot but one idle. That batch is common: a run's seed
programs once the baseline program is read from its runs (on `minatar-cpu`, LPO alone; its
four games ~5.6 minutes of one core while the other waited), `metarl evaluate` of one program,
the incumbent's re-measurement on the test games. Its envs are independent runs (one compiled
program each, on the batch's seeds and layout), so they can train in several trainer jobs at
once and give the same returns: the baseline's own runs are trained in env shares
(cascade.baseline_shares) and a candidate trained on the whole plan scores exactly 1.0 against
them.

The split keeps the cascade's order: the plan's envs are cut into contiguous groups, the first
holding the short run, and the merged outcome is what one job walking the plan would give: the
scores of every group up to the first that stopped, then that group's own (its stage and
reason). What the later groups trained in the meantime is dropped (it costs idle slots only).
"""

from __future__ import annotations

from dataclasses import replace

from metarl.evaluation.outcome import Outcome
from metarl.evaluation.settings import CascadeSettings, PlannedRun, plan_runs


def env_groups(plan: list[PlannedRun], slots: int) -> list[list[str]]:
    """The plan's envs, in plan order, in at most `slots` contiguous groups of nearly equal
    size (the earlier groups one larger). One group when there is one env or one slot.

    Args:
        plan: the planned segments.
        slots: trainer jobs that may run at once.

    Returns:
        Non-empty lists of env names whose concatenation is the plan's envs in order.
    """
    envs = list(dict.fromkeys(entry.config.env_name for entry in plan))
    count = max(1, min(int(slots), len(envs)))
    size, extra = divmod(len(envs), count)
    groups, start = [], 0
    for index in range(count):
        stop = start + size + (1 if index < extra else 0)
        groups.append(envs[start:stop])
        start = stop
    return groups


def group_settings(settings: CascadeSettings, groups: list[list[str]]) -> list[CascadeSettings]:
    """The settings of each group's trainer job: its envs only, the short run in the first.

    Returns:
        One CascadeSettings per group, or [] when the groups' plans are not exactly the whole
        plan cut in order (a plan these settings cannot split: it trains in one job).
    """
    parts = [
        replace(settings, envs=list(envs), skip_short=settings.skip_short or index > 0)
        for index, envs in enumerate(groups)
    ]
    whole = [entry for part in parts for entry in plan_runs(part)]
    return parts if len(groups) > 1 and whole == plan_runs(settings) else []


def merge_outcomes(parts: list[Outcome]) -> Outcome:
    """One outcome from the groups' outcomes (each already verified against its own plan),
    as one job walking the whole plan would have stopped: the first group that did not pass
    decides the stage, reason and fault, with the earlier groups' scores before its own.

    Returns:
        A new Outcome; its scores are re-verified against the whole plan by the caller.
    """
    first = parts[0]
    stop = next((i for i, part in enumerate(parts) if not part.passed), None)
    decided = parts[stop] if stop is not None else parts[-1]
    kept = parts if stop is None else parts[: stop + 1]
    timings: dict[str, float] = {}
    for part in kept:
        for key, value in part.timings.items():
            if isinstance(value, (int, float)):
                timings[key] = timings.get(key, 0.0) + float(value)
    return Outcome(
        passed=stop is None,
        stage=decided.stage,
        reason=decided.reason,
        warnings=list(dict.fromkeys(w for part in kept for w in part.warnings)),
        env_scores=[score for part in kept for score in part.env_scores],
        fingerprint=first.fingerprint,
        duplicate_of=decided.duplicate_of,
        behaviour=first.behaviour,
        timings=timings,
        fault=None if stop is None else decided.fault,
    )
