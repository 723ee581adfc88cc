"""A run's candidates as the fitness plot's points, and what is read from those points alone: the
incumbent line and the funnel of where candidates stopped. Apart from the rest of a run's story
(story.py) because comparison.py and figures.py need the points without a whole story.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from metarl.archives.incumbents import RACED, RunIncumbent
from metarl.archives.queries import Setting, reference_setting, test_column
from metarl.evaluation.outcome import EVALUATOR_FAULT, STAGES

# how the funnel names the stages a candidate can stop at (evaluation.outcome.STAGES)
STAGE_LABELS = {
    "propose": "proposed (a program was extracted)",
    "dedup": "new (not a repeat of an archived program)",
    "static": "static check",
    "probes": "probes",
    "short": "short run",
    "full": "full run",
}


@dataclass
class Point:
    """One candidate on the fitness plot."""

    id: str
    seq: int
    name: str
    label: str  # the method, and the proposer for discovery: what colours the point
    status: str
    stage: str | None
    reason: str | None
    fitness: float | None
    fitness_ci: list[float] | None
    confirmed: float | None
    heldout: float | None  # the reported test score: final, else confirmed, else selection
    is_seed: bool

    @property
    def score(self) -> float | None:
        """The number selection compares: the confirmed fitness when there is one."""
        return self.confirmed if self.confirmed is not None else self.fitness


# where an incumbent line comes from (`Incumbent.source`), as the page's caption says it
RECORDED = "recorded"  # the decisions the run recorded (a discovery run's `state.incumbents`)
RUNNING_BEST = "running best"  # the best score so far: the decisions of a best-score rule
CURRENT = "current"  # the run's incumbent alone: it recorded no history the page can trust
INCUMBENT_SOURCES = {
    RECORDED: "the incumbent selection recorded after the seed programs and after each "
    "generation that changed it",
    RUNNING_BEST: "the best score so far (this run's rule: the best train score wins)",
    CURRENT: "the run's incumbent only (the run did not record when it changed)",
}


@dataclass
class Incumbent:
    """The run's incumbent at each point it changed: a step at `seq[i]` (the last candidate
    scored when it was decided) to candidate `ids[i]`."""

    seq: list[int] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    heldout: list[float | None] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    source: str = RUNNING_BEST  # RECORDED | RUNNING_BEST | CURRENT

    @property
    def caption(self) -> str:
        return INCUMBENT_SOURCES[self.source]


@dataclass
class FunnelStage:
    stage: str
    label: str
    entered: int  # candidates that reached this stage
    stopped: int  # candidates that stopped here


@dataclass
class Funnel:
    total: int  # proposals (seed programs not counted)
    passed: int
    stages: list[FunnelStage]  # the proposals the evaluator judged (its faults not counted)
    reasons: list[tuple[str, str, int]]  # (stage, reason, count), most common first
    faults: int = 0  # evaluator faults: proposals whose evaluation says nothing about them


def _label(row: dict) -> str:
    method = row.get("method") or "discovery"
    if row.get("is_seed"):
        return "seed program"
    proposer = row.get("proposer") or ""
    return f"{method}: {proposer}" if method == "discovery" and proposer else method


def _interval(row: dict, score: str) -> list[float] | None:
    low, high = row.get(f"{score}_low"), row.get(f"{score}_high")
    return [low, high] if low is not None and high is not None else None


def _test_score(row: dict) -> float | None:
    """The candidate's reported test score (`queries.test_column`): final, else confirmed,
    else the one measured with it; None without one."""
    column, _ = test_column(row)
    return row[column] if column else None


def points_of(rows: list[dict]) -> list[Point]:
    """The fitness plot's points from `report_rows.run_points` rows.

    Args:
        rows: the run's rows, in proposal order.

    Returns:
        One Point per row, in the same order.
    """
    return [
        Point(
            id=row["id"],
            seq=row["seq"],
            name=row["name"] or "",
            label=_label(row),
            status=row["status"] or "",
            stage=row["stage"],
            reason=row["reason"],
            fitness=row["fitness"] if row["status"] == "passed" else None,
            fitness_ci=_interval(row, "fitness"),
            confirmed=row["confirmed_fitness"],
            heldout=_test_score(row),
            is_seed=bool(row["is_seed"]),
        )
        for row in rows
    ]


def incumbent_of(points: list[Point]) -> Incumbent:
    """The running best score over `points` in proposal order (seed programs included: they
    are the incumbent a search has to beat): the decisions of a best-score rule, which is not
    every run's (`incumbent_line` says when it is)."""
    out = Incumbent(source=RUNNING_BEST)
    for point in points:
        score = point.score
        if score is None or (out.score and score <= out.score[-1]):
            continue
        out.seq.append(point.seq)
        out.score.append(score)
        out.heldout.append(point.heldout)
        out.ids.append(point.id)
    return out


def incumbent_line(run: dict, points: list[Point], incumbent: RunIncumbent | None) -> Incumbent:
    """The fitness plot's incumbent line: what selection decided, never re-derived from scores
    a rule did not use.

    Args:
        run: the run's row (its `state.incumbents`: a discovery run's recorded decisions).
        points: its candidates (`points_of`).
        incumbent: its incumbent (`incumbents.run_incumbent`): where every line ends.

    Returns:
        The recorded decisions, each at the last candidate scored when it was made, when they
        end at `incumbent`; else, for a run whose rule is the best train score (no validation
        races), the running best score (`incumbent_of`) when it ends there; else `incumbent`
        alone, from the candidate's own place. Empty without an incumbent.
    """
    if incumbent is None:
        return Incumbent(source=CURRENT)
    by_id = {p.id: p for p in points}
    state = run.get("state")
    history = state.get("incumbents") if isinstance(state, dict) else None
    if history and history[-1].get("id") == incumbent.id:
        out = Incumbent(source=RECORDED)
        for step in history:
            point = by_id.get(step.get("id"))
            if point is None or point.score is None:
                break
            out.seq.append(int(step.get("seq", point.seq)))
            out.score.append(point.score)
            out.heldout.append(point.heldout)
            out.ids.append(point.id)
        else:
            return out
    if incumbent.decided_by != RACED:
        running = incumbent_of(points)
        if running.ids and running.ids[-1] == incumbent.id:
            return running
    point = by_id.get(incumbent.id)
    if point is None or point.score is None:
        return Incumbent(source=CURRENT)
    return Incumbent([point.seq], [point.score], [point.heldout], [point.id], source=CURRENT)


def funnel_of(points: list[Point], reasons: int) -> Funnel:
    """Where the run's proposals (seed programs excluded) stopped, and the commonest reasons;
    evaluator faults are counted apart (they stopped nowhere the candidate could answer for).

    Args:
        points: the run's candidates.
        reasons: how many of the most common (stage, reason) pairs to keep.
    """
    proposals = [p for p in points if not p.is_seed]
    faults = [p for p in proposals if is_fault(p)]
    judged = [p for p in proposals if not is_fault(p)]
    stopped = Counter(p.stage for p in judged if p.status != "passed")
    entered = len(judged)
    stages = []
    for stage in STAGES:
        stages.append(FunnelStage(stage, STAGE_LABELS[stage], entered, stopped.get(stage, 0)))
        entered -= stopped.get(stage, 0)
    why = Counter(
        ("evaluator fault" if is_fault(p) else p.stage or "?", _first_line(p.reason))
        for p in proposals
        if p.status != "passed"
    )
    return Funnel(
        total=len(proposals),
        passed=sum(p.status == "passed" for p in proposals),
        stages=stages,
        reasons=[(stage, reason, n) for (stage, reason), n in why.most_common(reasons)],
        faults=len(faults),
    )


def is_fault(point: Point) -> bool:
    """Whether the evaluator, not the candidate, failed (status `fault`; in an archive from
    before that status, a failure whose reason has the evaluator-error prefix)."""
    legacy = point.status == "failed" and (point.reason or "").startswith(EVALUATOR_FAULT)
    return point.status == "fault" or legacy


def _first_line(reason: str | None, limit: int = 160) -> str:
    """A reason's first line, at most `limit` characters; a blank reason says so."""
    lines = (reason or "").strip().splitlines()
    line = lines[0] if lines else "no reason recorded"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def setting_of(points: list[dict]) -> Setting | None:
    """The setting most of a run's scored candidates share."""
    settings = [
        Setting(r["task"], r["suite"], len(r["seeds"]), r["total_timesteps"])
        for r in points
        if r["status"] == "passed"
    ]
    return reference_setting(settings)
