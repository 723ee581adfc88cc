"""A run's story: everything a run's report shows, read from the archive into plain data (no
plotting here), so the numbers a test checks are the numbers drawn (several runs side by side:
comparison.py). Its parts live apart: the candidates' points, incumbent line and funnel in
points.py, the top candidates' curves in curves.py, an LPG run's curriculum in levels.py; this
file holds the run's header, its LLM usage and `run_story`, which puts the parts together.

Every method's candidates go through the same cascade, so one story fits them all: the fitness
of every candidate in proposal order, the incumbent, the funnel of where candidates stopped, the
top candidates' curves, scores, ancestry and code. What only one method has comes from its run
state: an ES run's per-generation fitness and sigma (and, for an LPG run with a curriculum, the
levels it trained on and its level buffer), a GRPO run's per-step reward and pass rates, and
from the calls table: an LLM run's tokens, cost and latency.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from metarl.archives.incumbents import RunCounts, RunIncumbent, run_counts, run_incumbent
from metarl.archives.queries import (
    LeaderRow,
    Setting,
    leaderboard,
    lineage,
    run_protocols,
)
from metarl.archives.report_rows import (
    evaluated_program,
    full_evaluations,
    program_rows,
    run_calls,
    run_points,
)
from metarl.archives.store import Archive
from metarl.discovery.novelty import summary_line
from metarl.evaluation.text import redact_config, redact_secrets
from metarl.report.curves import Curves, curves_of, quantile
from metarl.report.generalisation import (
    UNRECORDED,
    Generalisation,
    generalisation_of,
    protocol_label,
)
from metarl.report.levels import CurriculumGeneration, curriculum_of, distribution_of
from metarl.report.points import (
    Funnel,
    Incumbent,
    Point,
    funnel_of,
    incumbent_line,
    points_of,
    setting_of,
)
from metarl.report.programs import Program, program_of
from metarl.report.settings import ReportSettings
from metarl.tasks import UnknownTask, get_network_task, get_task, is_network_task
from metarl.tasks.candidate import source_hash

if TYPE_CHECKING:  # annotation only: adaptation.py and models.py import this module
    from metarl.report.adaptation import AdaptationCurve
    from metarl.report.models import ModelsSection


def reference_of(task: str) -> str:
    """What a task's normalised scores are relative to (1.0), as the page says it: PPO with
    the baseline program, or the reference a network task declares (LPG's actor-critic)."""
    if is_network_task(task):
        return f"the reference ({get_network_task(task).reference_short})"
    return "PPO"


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
    reference: str = "PPO"  # what normalised scores are relative to (reference_of)
    # a meta-RL run's adaptation curves on the held-out roles (report/adaptation.py, which
    # page.write_report attaches); empty for runs without them
    adaptation: list[AdaptationCurve] = field(default_factory=list)
    # a run with several LLMs: each one's share of the proposals and yield over generations
    # (report/models.py, which page.write_report attaches); None for every other run
    models: ModelsSection | None = None


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
                latency_p90_s=quantile(latencies, 0.9),
                minutes=minutes,
                tokens=[(r["prompt_tokens"] or 0) + (r["completion_tokens"] or 0) for r in rows],
                latency_s=[r["latency_s"] for r in rows],
                cumulative_cost=cumulative,
            )
        )
    return out


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
    if top and not baseline and not is_network_task(task):  # its reference is no program
        notes.append(
            "the baseline program was not evaluated at the top candidates' setting in this "
            "archive, so its learning curves are not drawn"
        )
    curve_ids = ([baseline] if baseline else []) + [r.id for r in top if r.id != baseline]
    chosen = run_incumbent(archive, run_id)  # the one the header, the CLI and the board name
    incumbent = incumbent_line(run, points, chosen)
    best = chosen.id if chosen else None
    levels_of = best if is_network_task(task) and best else None
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
        reference=reference_of(task),
    )
