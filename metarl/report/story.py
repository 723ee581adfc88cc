"""A run's story: everything a run's report shows, read from the archive into plain data (no
plotting here), so the numbers a test checks are the numbers drawn (several runs side by side:
comparison.py).

Every method's candidates go through the same cascade, so one story fits them all: the fitness
of every candidate in proposal order, the incumbent, the funnel of where candidates stopped, the
top candidates' curves, scores, ancestry and code. What only one method has comes from its run
state: an ES run's per-generation fitness and sigma (and, for an LPG run with a curriculum, the
levels it trained on and its level buffer), a GRPO run's per-step reward and pass rates, and
from the calls table: an LLM run's tokens, cost and latency.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from metarl.archives.incumbents import RACED, RunCounts, RunIncumbent, run_counts, run_incumbent
from metarl.archives.queries import (
    LeaderRow,
    Setting,
    leaderboard,
    lineage,
    reference_setting,
    run_protocols,
    test_column,
)
from metarl.archives.report_rows import (
    evaluated_program,
    full_evaluations,
    program_rows,
    run_calls,
    run_points,
)
from metarl.archives.store import Archive
from metarl.blackbox.config import LPG_TASK
from metarl.discovery.novelty import summary_line
from metarl.errors import MetarlError
from metarl.evaluation.outcome import EVALUATOR_FAULT, STAGES
from metarl.evaluation.text import redact_config, redact_secrets
from metarl.report.generalisation import (
    UNRECORDED,
    Generalisation,
    generalisation_of,
    protocol_label,
)
from metarl.report.programs import Program, program_of
from metarl.report.settings import ReportSettings
from metarl.rl.distributions import EnvDistribution
from metarl.rl.suites import get_suite
from metarl.tasks import UnknownTask, get_task
from metarl.tasks.candidate import source_hash

if TYPE_CHECKING:  # annotation only: adaptation.py and models.py import this module
    from metarl.report.adaptation import AdaptationCurve
    from metarl.report.models import ModelsSection

# what a task's normalised scores are relative to (1.0), as the page says it
REFERENCES = {LPG_TASK: "the reference (actor-critic)"}
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
class EnvCurve:
    """A candidate's learning curve and score on one environment."""

    env: str
    heldout: bool
    steps: list[int]
    mean: list[float | None]
    std: list[float | None]  # empty when the archive did not record the seed spread
    normalised: float | None
    normalised_ci: list[float] | None
    seeds: int
    role: str = ""  # train | validation | test ("" in rows from before roles)
    final_return: float | None = None  # the mean over seeds of the agents' final return
    reference_return: float | None = None  # the reference's (the baseline PPO; an LPG's: A2C)
    random_return: float | None = None  # a uniformly random policy's

    @property
    def beats_reference(self) -> bool | None:
        """Whether its final return is above the reference's; None when either is unknown."""
        if self.final_return is None or self.reference_return is None:
            return None
        return self.final_return > self.reference_return


@dataclass
class Curves:
    id: str
    name: str
    is_baseline: bool
    envs: list[EnvCurve]


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


@dataclass
class ModelUsage:
    """An LLM's calls in one run: totals, and the series the usage plot draws."""

    model: str
    calls: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None  # None when no call's cost was known (unknown is not zero)
    latency_median_s: float | None
    latency_p90_s: float | None
    minutes: list[float]  # each call's time since the run started
    tokens: list[int]
    latency_s: list[float | None]
    cumulative_cost: list[float | None]


@dataclass
class BufferLevel:
    """One level of a curriculum's buffer after a generation (the top by score)."""

    seed: int
    name: str  # its environment name, e.g. Grid-small:level=17
    score: float | None  # GROOVE: regret; PLR: the reference's positive value loss
    staleness: int  # levels drawn since it was last drawn or inserted
    drawn: bool  # drawn (trained on) this generation


@dataclass
class DrawnLevel:
    """One level trained on in a generation (by an antithetic pair of members)."""

    seed: int
    name: str
    lifetime: int | None  # agent updates
    pair_return: float | None  # the pair's mean return
    regret: float | None  # the reference's return minus the pair's; None: not measured


@dataclass
class CurriculumGeneration:
    """What an LPG run's curriculum did in one generation (`state.history`)."""

    generation: int
    replay: bool  # the levels were replayed from the buffer, else freshly sampled
    drawn: list[DrawnLevel]
    buffer: list[BufferLevel]  # the buffer after the generation, top by score (a snapshot)
    buffer_size: int  # levels in the whole buffer


@dataclass
class Header:
    """The run's row, as the page's header shows it."""

    id: str
    task: str
    suite: str
    method: str
    proposer: str
    model: str
    status: str
    stop_reason: str
    rng_seed: int | None
    setting: Setting | None  # the task, suite, seeds and budget most candidates were scored at
    budget: str
    started_at: str
    ended_at: str
    wall_s: float | None
    cost_usd: float | None
    candidates: int  # children (`runs.candidates_count`): what the budget counts
    best_id: str | None  # the run's incumbent (`incumbents.run_incumbent`)
    best_fitness: float | None  # its score (confirmed, else train)
    versions: dict
    device: str
    host: str
    config: dict
    protocol: str = UNRECORDED  # the run's evaluation protocol (what its scores mean)
    # evaluations saved by rejecting near-duplicates (discovery/novelty.py `summary_line`);
    # "" for runs that do not count them
    near_duplicates: str = ""
    # what the run archived (children, seed programs, scored) and its incumbent, worded as
    # `metarl show RUN` and the run summary word them; None where the caller had none
    counts: RunCounts | None = None
    incumbent: RunIncumbent | None = None

    @property
    def llm_cost(self) -> str:
        """The LLM cost as the page shows it; "" for a run that spent nothing (no LLM)."""
        if not self.cost_usd:
            return ""
        return f"${self.cost_usd:.4f}"


@dataclass
class RunStory:
    header: Header
    points: list[Point]
    incumbent: Incumbent
    top: list[LeaderRow]
    envs: list[str]  # training envs of the top board, in order
    curves: list[Curves]  # the baseline program's first when the archive has it
    funnel: Funnel
    lineages: list[dict]  # archives.queries.lineage trees of the top candidates
    usage: list[ModelUsage]
    es_history: list[dict]  # per generation: generation, best, mean, std, sigma, seconds
    grpo_steps: list[dict]  # per step: step, mean_reward, pass_rates, kl, seconds, ...
    programs: list[Program]
    notes: list[str] = field(default_factory=list)
    generalisation: Generalisation | None = None  # train vs test of every scored candidate
    # an LPG run's curriculum per generation; empty without a level buffer (other runs, a
    # uniform curriculum, archives from before curricula)
    curriculum: list[CurriculumGeneration] = field(default_factory=list)
    # an LPG run's best export on the test role (the held-out tabular levels, Catch, CartPole)
    heldout_levels: Curves | None = None
    reference: str = "PPO"  # what normalised scores are relative to (REFERENCES)
    # a meta-RL run's adaptation curves on the held-out roles (report/adaptation.py, which
    # page.write_report attaches); empty for runs without them
    adaptation: list[AdaptationCurve] = field(default_factory=list)
    # a run with several LLMs: each one's share of the proposals and yield over generations
    # (report/models.py, which page.write_report attaches); None for every other run
    models: ModelsSection | None = None


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


def _time(stamp: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp) if stamp else None
    except ValueError:
        return None


def usage_of(calls: list[dict], started_at: str | None) -> list[ModelUsage]:
    """Per model: the run's LLM calls summed, and their series over time."""
    start = _time(started_at)
    by_model: dict[str, list[dict]] = {}
    for call in calls:
        by_model.setdefault(call["model"] or "?", []).append(call)
    out = []
    for model, rows in by_model.items():
        latencies = [r["latency_s"] for r in rows if r["latency_s"] is not None]
        costs = [r["cost_usd"] for r in rows]
        known = [c for c in costs if c is not None]
        running, cumulative = 0.0, []
        for cost in costs:
            running += cost or 0.0
            cumulative.append(running if known else None)
        minutes = []
        for row in rows:
            at = _time(row["created_at"])
            minutes.append((at - start).total_seconds() / 60 if at and start else len(minutes))
        out.append(
            ModelUsage(
                model=model,
                calls=len(rows),
                errors=sum(bool(r["error"]) for r in rows),
                prompt_tokens=sum(r["prompt_tokens"] or 0 for r in rows),
                completion_tokens=sum(r["completion_tokens"] or 0 for r in rows),
                cost_usd=sum(known) if known else None,
                latency_median_s=statistics.median(latencies) if latencies else None,
                latency_p90_s=_quantile(latencies, 0.9),
                minutes=minutes,
                tokens=[(r["prompt_tokens"] or 0) + (r["completion_tokens"] or 0) for r in rows],
                latency_s=[r["latency_s"] for r in rows],
                cumulative_cost=cumulative,
            )
        )
    return out


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def curves_of(candidate_id: str, name: str, evaluations: list[dict], baseline: bool) -> Curves:
    """A candidate's full-budget selection curves and returns, training envs first."""
    envs = [
        EnvCurve(
            env=ev["env"],
            heldout=bool(ev["heldout"]),
            steps=list(ev["curve_steps"] or []),
            mean=list(ev["curve"] or []),
            std=list(ev.get("curve_std") or []),
            normalised=ev["normalised"],
            normalised_ci=(
                [ev["normalised_low"], ev["normalised_high"]]
                if ev.get("normalised_low") is not None and ev.get("normalised_high") is not None
                else None
            ),
            seeds=len(ev["seeds"] or []),
            role=ev.get("role") or "",
            final_return=ev.get("mean"),
            reference_return=ev.get("baseline_mean"),
            random_return=ev.get("random_mean"),
        )
        for ev in evaluations
    ]
    envs.sort(key=lambda e: e.heldout)
    return Curves(id=candidate_id, name=name, is_baseline=baseline, envs=envs)


def distribution_of(suite: str) -> EnvDistribution | None:
    """The distribution a suite draws its levels from (what names a curriculum's seeds);
    None for a suite without one, or one this metarl does not know (an older archive's)."""
    try:
        return get_suite(suite).distribution
    except MetarlError:
        return None


def level_name(distribution: EnvDistribution | None, seed: int) -> str:
    """Level `seed`'s environment name, e.g. `Grid-small:level=17` (`level=17` without a
    distribution)."""
    try:
        return distribution.env(seed) if distribution is not None else f"level={seed}"
    except ValueError:
        return f"level={seed}"


def _at(values, index: int):
    """values[index], or None when `values` is not a list that long."""
    return values[index] if isinstance(values, list) and index < len(values) else None


def curriculum_of(
    history: list[dict], distribution: EnvDistribution | None
) -> list[CurriculumGeneration]:
    """An LPG run's curriculum per generation, from its ES history.

    Args:
        history: `state.history`, one dict per generation; an LPG run's entries carry
            `replay`, `levels`, `lifetimes`, `returns`, `regret`, `buffer` ([seed, score,
            staleness], top by score) and `buffer_size` (blackbox/lpg_es.py).
        distribution: what names the levels (`distribution_of` the run's suite).

    Returns:
        One CurriculumGeneration per entry with a `buffer`, in order; [] when no entry has a
        buffered level (another method, a uniform curriculum, an older archive).
    """
    out = []
    for entry in history:
        buffer = entry.get("buffer")
        if not isinstance(buffer, list):
            continue
        seeds = [int(s) for s in entry.get("levels") or []]
        drawn = [
            DrawnLevel(
                seed=seed,
                name=level_name(distribution, seed),
                lifetime=_at(entry.get("lifetimes"), i),
                pair_return=_at(entry.get("returns"), i),
                regret=_at(entry.get("regret"), i),
            )
            for i, seed in enumerate(seeds)
        ]
        out.append(
            CurriculumGeneration(
                generation=int(entry.get("generation", len(out) + 1)),
                replay=bool(entry.get("replay")),
                drawn=drawn,
                buffer=[
                    BufferLevel(
                        seed=int(seed),
                        name=level_name(distribution, int(seed)),
                        score=score,
                        staleness=int(staleness),
                        drawn=int(seed) in seeds,
                    )
                    for seed, score, staleness in buffer
                ],
                buffer_size=int(entry.get("buffer_size") or len(buffer)),
            )
        )
    return out if any(g.buffer for g in out) else []


def setting_of(points: list[dict]) -> Setting | None:
    """The setting most of a run's scored candidates share."""
    settings = [
        Setting(r["task"], r["suite"], len(r["seeds"]), r["total_timesteps"])
        for r in points
        if r["status"] == "passed"
    ]
    return reference_setting(settings)


def header_of(
    run: dict,
    setting: Setting | None,
    protocol: str | None = None,
    *,
    counts: RunCounts | None = None,
    incumbent: RunIncumbent | None = None,
) -> Header:
    """The page's header of a run.

    Args:
        run: the run's row, decoded.
        setting: the setting most of its candidates were scored at.
        protocol: its protocol label (`queries.run_protocols`); None or "": the runs column,
            else its config's "protocol", else "unrecorded".
        counts: its children, seed programs and scored candidates (`incumbents.run_counts`).
        incumbent: its incumbent (`incumbents.run_incumbent`); without one, the run's row's.

    Returns:
        The Header.
    """
    # as archived since credentials stopped being stored; an older archive's too
    config = redact_config(run.get("config") or {})
    if run.get("budget_candidates") is not None:
        budget = f"{run['budget_candidates']} candidates"
    elif config.get("generations"):
        budget = f"{config['generations']} generations of {config.get('population', '?')}"
    elif config.get("steps"):
        budget = f"{config['steps']} steps"
    else:
        budget = "—"
    if run.get("max_time_s"):
        budget += f", at most {run['max_time_s']:g} s"
    if run.get("max_cost_usd"):
        budget += f", at most ${run['max_cost_usd']:g}"
    state = run.get("state")
    return Header(
        id=run["id"],
        task=run.get("task") or "",
        suite=run.get("suite") or "",
        method=run.get("method") or "discovery",
        proposer=run.get("proposer") or "",
        model=run.get("model") or "",
        status=run.get("status") or "",
        stop_reason=redact_secrets(run.get("stop_reason") or run.get("error") or ""),
        rng_seed=run.get("seed"),
        setting=setting,
        budget=budget,
        started_at=run.get("started_at") or "",
        ended_at=run.get("ended_at") or "",
        wall_s=run.get("elapsed_s"),
        cost_usd=run.get("cost_usd"),
        candidates=counts.children if counts else run.get("candidates_count") or 0,
        best_id=incumbent.id if incumbent else run.get("best_id"),
        best_fitness=incumbent.score if incumbent else run.get("best_fitness"),
        versions=run.get("versions") or {},
        device=run.get("device") or "",
        host=run.get("host") or "",
        config=config,
        protocol=protocol_label(protocol or run.get("protocol") or config.get("protocol")),
        near_duplicates=summary_line(state if isinstance(state, dict) else None, config),
        counts=counts,
        incumbent=incumbent,
    )


def _baseline_id(archive: Archive, run: dict, top: list[LeaderRow], rows: list[dict]) -> str:
    """The baseline program's candidate at the top candidates' evaluation key: the run's own
    seed when it evaluated it, else the same program evaluated the same way in another run."""
    try:
        task = get_task(run.get("task") or "")
    except UnknownTask:
        return ""
    baseline_hash = source_hash(task.baseline_program().source)
    keys = {r["eval_key"] for r in rows if r["id"] in {t.id for t in top}}
    for row in rows:
        if row["hash"] == baseline_hash and row["status"] == "passed" and row["eval_key"] in keys:
            return row["id"]
    for key in keys:
        found = evaluated_program(archive, baseline_hash, key)
        if found:
            return found
    return ""


def run_story(archive: Archive, run_id: str, settings: ReportSettings) -> RunStory:
    """Everything run `run_id`'s report shows.

    Args:
        archive: the archive holding the run.
        run_id: the run.
        settings: how many candidates each section shows.

    Returns:
        The RunStory.

    Raises:
        ArchiveError: no such run.
    """
    run = archive.get_run(run_id)
    rows = run_points(archive, run_id)
    points = points_of(rows)
    board = leaderboard(archive, run_id=run_id, limit=max(settings.top, settings.code))
    top = board.rows[: settings.top]
    notes = []
    task = run.get("task") or ""
    baseline = _baseline_id(archive, run, top, rows)
    if top and not baseline and task != LPG_TASK:  # an LPG's reference is no program
        notes.append(
            "the baseline program was not evaluated at the top candidates' setting in this "
            "archive, so its learning curves are not drawn"
        )
    curve_ids = ([baseline] if baseline else []) + [r.id for r in top if r.id != baseline]
    chosen = run_incumbent(archive, run_id)  # the one the header, the CLI and the board name
    incumbent = incumbent_line(run, points, chosen)
    best = chosen.id if chosen else None
    levels_of = best if task == LPG_TASK and best else None
    evaluations = full_evaluations(
        archive, curve_ids + ([levels_of] if levels_of and levels_of not in curve_ids else [])
    )
    names = {r.id: r.name for r in top}
    code_ids = [r.id for r in board.rows[: settings.code]]
    programs = program_rows(archive, curve_ids + code_ids + ([levels_of] if levels_of else []))
    curves = [
        curves_of(
            cid,
            names.get(cid) or programs.get(cid, {}).get("name") or "",
            evaluations[cid],
            cid == baseline,
        )
        for cid in curve_ids
    ]
    if any(env.steps and not env.std for c in curves for env in c.envs):
        notes.append("some curves were archived before the seed spread was recorded: no band")
    parents = program_rows(
        archive,
        [(programs[c].get("parent_ids") or [None])[0] for c in code_ids if c in programs],
    )
    scores = {r.id: r for r in board.rows}
    shown = []
    for cid in code_ids:
        if cid in programs:
            parent_ids = programs[cid].get("parent_ids") or []
            parent = parents.get(parent_ids[0]) if parent_ids else None
            shown.append(program_of(programs[cid], parent, scores.get(cid)))
    state = run.get("state") or {}
    method = run.get("method") or "discovery"
    history = list(state.get("history") or []) if method == "es" else []
    heldout_levels = None
    if levels_of:
        name = names.get(levels_of) or programs.get(levels_of, {}).get("name") or ""
        every = curves_of(levels_of, name, evaluations[levels_of], False)
        heldout_levels = Curves(every.id, every.name, False, [e for e in every.envs if e.heldout])
    header = header_of(
        run,
        setting_of(rows),
        run_protocols(archive, [run_id]).get(run_id),
        counts=run_counts(archive, run_id),
        incumbent=chosen,
    )
    return RunStory(
        header=header,
        points=points,
        incumbent=incumbent,
        top=top,
        envs=board.envs,
        curves=curves,
        funnel=funnel_of(points, settings.reasons),
        lineages=[
            lineage(archive, r.id, max_depth=settings.lineage_depth)
            for r in board.rows[: settings.lineages]
        ],
        usage=usage_of(run_calls(archive, run_id), run.get("started_at")),
        es_history=history,
        grpo_steps=list(state.get("steps") or []) if method == "grpo" else [],
        programs=shown,
        notes=notes,
        generalisation=generalisation_of(rows, run_id, best, header.protocol),
        curriculum=curriculum_of(
            history or list(state.get("curriculum_history") or []), distribution_of(header.suite)
        ),
        heldout_levels=heldout_levels,
        reference=REFERENCES.get(task, "PPO"),
    )
