"""Several runs side by side: each run's best score, how many proposals it took to beat the
baseline, and what separates its setting from the one most runs share, plus one leaderboard
over all of them. Plain data, like a run's story (story.py), so a test checks what is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metarl.archives.incumbents import run_incumbents
from metarl.archives.queries import (
    LeaderRow,
    Setting,
    leaderboard,
    reference_setting,
    run_protocols,
)
from metarl.archives.report_rows import run_points
from metarl.archives.store import Archive
from metarl.report.generalisation import Generalisation, generalisation_of, protocol_label
from metarl.report.points import points_of, setting_of


@dataclass
class RunComparison:
    """One run on the comparison page."""

    run_id: str
    method: str
    proposer: str
    status: str
    proposals: int  # children: candidates proposed (seed programs not counted)
    # the best child's score (confirmed, else train), its interval and test score: sample
    # efficiency, not the run's incumbent (`incumbent`: validation races may decide that)
    best: float | None
    best_ci: list[float] | None
    best_heldout: float | None
    setting: Setting | None
    differs: list[str]
    to_beat: int | None  # proposals until one scored above the baseline (fitness > 1)
    to_beat_ci: int | None  # ... with the 95% interval's lower end above 1
    best_so_far: list[float | None]  # after each proposal
    protocol: str = ""  # the run's evaluation protocol ("unrecorded" for older runs)
    incumbent: str | None = None  # the run's incumbent (`incumbents.run_incumbents`)


@dataclass
class Comparison:
    runs: list[RunComparison]
    reference: Setting | None
    board: list[LeaderRow]
    envs: list[str]
    # every run's scored candidates, train against test, each run's incumbent marked
    generalisation: list[Generalisation] = field(default_factory=list)


def compare_runs(archive: Archive, run_ids: list[str], limit: int) -> Comparison:
    """Runs side by side: best score, sample efficiency, comparability, one leaderboard.

    Args:
        archive: the archive holding the runs.
        run_ids: the runs, in the order shown.
        limit: rows of the cross-run leaderboard.

    Returns:
        The Comparison; a run's `differs` names what separates its setting from the one most of
        the runs share; `generalisation` has each run's train-vs-test data, in `run_ids` order.
    """
    runs, gaps = [], []
    protocols = run_protocols(archive, run_ids)
    incumbents = run_incumbents(archive, run_ids)
    for run_id in run_ids:
        run = archive.get_run(run_id)
        rows = run_points(archive, run_id)
        every = points_of(rows)
        points = [p for p in every if not p.is_seed]
        protocol = protocol_label(protocols.get(run_id))
        gaps.append(generalisation_of(rows, run_id, incumbents.get(run_id), protocol))
        best_so_far, best, best_point = [], None, None
        to_beat = to_beat_ci = None
        for index, point in enumerate(points, 1):
            score = point.score
            if score is not None and (best is None or score > best):
                best, best_point = score, point
            best_so_far.append(best)
            if to_beat is None and point.fitness is not None and point.fitness > 1.0:
                to_beat = index
            if to_beat_ci is None and point.fitness_ci and point.fitness_ci[0] > 1.0:
                to_beat_ci = index
        runs.append(
            RunComparison(
                run_id=run_id,
                method=run.get("method") or "discovery",
                proposer=(run.get("model") or run.get("proposer") or ""),
                status=run.get("status") or "",
                proposals=len(points),
                best=best,
                best_ci=best_point.fitness_ci if best_point else None,
                best_heldout=best_point.heldout if best_point else None,
                setting=setting_of(rows),
                differs=[],
                to_beat=to_beat,
                to_beat_ci=to_beat_ci,
                best_so_far=best_so_far,
                protocol=protocol,
                incumbent=incumbents.get(run_id),
            )
        )
    reference = reference_setting([r.setting for r in runs if r.setting is not None])
    for entry in runs:
        if entry.setting is not None and reference is not None:
            entry.differs = entry.setting.differences(reference)
    board = leaderboard(archive, all_runs=True, run_ids=run_ids, limit=limit)
    for row in board.rows:  # against the runs' reference, as the table of runs above it
        row.differs = row.setting.differences(reference) if reference else []
    return Comparison(
        runs=runs, reference=reference, board=board.rows, envs=board.envs, generalisation=gaps
    )
