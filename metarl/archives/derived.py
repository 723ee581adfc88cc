"""Candidates derived from an archived one: a distilled network, a symbolic formula.

Distillation and symbolic regression start from a *teacher*, any archived drift candidate (an
ES export, an LLM's program, a seed). Each derivation is a run of its own (`method` distil or
symbolic) with one candidate whose parent is the teacher, scored by the cascade with the
teacher's suite, seeds and budget, so the student and the teacher sit side by side on the
leaderboard. The method's own objective (fit errors, the expression) goes to `meta`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from metarl.archives.keys import eval_settings_key
from metarl.archives.reuse import evaluate_or_reuse
from metarl.archives.rows import candidate_row
from metarl.archives.runs import RunSession, RunSpec, open_run
from metarl.archives.store import Archive, ArchiveError
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.outcome import Outcome
from metarl.evaluation.settings import CascadeSettings
from metarl.platform import device_description, evaluation_identity
from metarl.rl.lpo import DriftSamples
from metarl.tasks import distillable_tasks

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Teacher:
    """The archived candidate a method derives from."""

    id: str
    code: str
    task: str
    suite: str
    seeds: int  # training seeds of its evaluation
    total_timesteps: int | None
    fitness: float | None
    # its training seed values when they were pinned (`--seed-values`): a student of a pinned
    # teacher is pinned to the same values; None: the student's are drawn afresh
    pinned_seeds: list[int] | None = None


class Derived(NamedTuple):
    """A derivation's archived result: the run, its one candidate, and its teacher."""

    run_id: str
    candidate_id: str
    teacher_id: str
    teacher_fitness: float | None
    outcome: Outcome
    meta: dict


def load_teacher(archive: Archive, ref: str) -> Teacher:
    """The candidate `ref` (an id or unique id prefix) as a teacher.

    Raises:
        ArchiveError: no such candidate, not a drift candidate, or it has no code.
    """
    row = archive.candidate(archive.resolve_candidate(ref))
    if row.get("task") not in distillable_tasks():
        raise ArchiveError(
            f"candidate {row['id']} is a {row.get('task')} candidate; only candidates of "
            f"{', '.join(distillable_tasks())} can be distilled"
        )
    if not row.get("code"):
        raise ArchiveError(f"candidate {row['id']} has no code to learn from")
    outcome = row.get("outcome") if isinstance(row.get("outcome"), dict) else {}
    pinned = bool(outcome.get("seeds_pinned")) and bool(row.get("seeds"))
    return Teacher(
        id=row["id"],
        code=row["code"],
        task=row["task"],
        suite=row.get("suite") or "classic",
        seeds=len(row.get("seeds") or []) or 2,
        total_timesteps=row.get("total_timesteps"),
        fitness=row.get("fitness"),
        pinned_seeds=list(row.get("seeds") or []) if pinned else None,
    )


def teacher_settings(
    teacher: Teacher, seed_values: list[int] | None = None, **limits: Any
) -> CascadeSettings:
    """The cascade settings that score a student as its teacher was scored (suite, budget,
    number of training seeds; the values drawn afresh unless `seed_values` or a pinned
    teacher pins them)."""
    seed_values = seed_values or teacher.pinned_seeds
    return CascadeSettings(
        suite=teacher.suite,
        seeds=len(seed_values) if seed_values else teacher.seeds,
        seed_values=seed_values,
        total_timesteps=teacher.total_timesteps,
        probe_seed=0 if seed_values else None,
        validation=True,  # a student is a final product: every role is reported
        **limits,
    )


def open_derived_run(archive: Archive, method: str, teacher: Teacher, config: dict) -> RunSession:
    """A new run of `method` deriving from `teacher`, through the shared lifecycle (heartbeat,
    log, finish or fail). A derivation is one short session: it has no resume.

    Args:
        archive: where the run goes.
        method: the archive's `method` value ("distil", "symbolic").
        teacher: what it derives from (its task and suite are the run's).
        config: the method's settings, stored with the run.

    Returns:
        The session, to enter: `with open_derived_run(...) as run:`.
    """
    spec = RunSpec(
        method=method,
        task=teacher.task,
        suite=teacher.suite,
        config=config,
        versions=evaluation_identity(),
        device=device_description(),
        proposer=method,
        mode=method,
    )
    return open_run(archive, spec)


def record_derived(
    archive: Archive,
    *,
    method: str,
    teacher: Teacher,
    code: str | None,
    outcome: Outcome,
    settings: CascadeSettings,
    name: str,
    thought: str,
    meta: dict,
    config: dict,
    seconds: float,
    run: RunSession | None = None,
    cached_from: str | None = None,
) -> tuple[str, str]:
    """Archive one candidate derived from `teacher` as the one candidate of a run of `method`,
    and finish that run.

    Args:
        run: the derivation's open session (`open_derived_run`); None: a run is opened and
            finished here, around the record.
        seconds: the derivation's wall time (sampling, fit, scoring).
        cached_from: the candidate whose evaluation `outcome` reuses (archives/reuse.py).
        (the rest: the candidate's program, outcome, scoring settings, labels and metadata,
        and the method's settings for a run opened here)

    Returns:
        (run id, candidate id).
    """
    if run is None:
        with open_derived_run(archive, method, teacher, config) as opened:
            return record_derived(
                archive,
                method=method,
                teacher=teacher,
                code=code,
                outcome=outcome,
                settings=settings,
                name=name,
                thought=thought,
                meta=meta,
                config=config,
                seconds=seconds,
                run=opened,
                cached_from=cached_from,
            )
    row = candidate_row(
        run_id=run.run_id,
        seq=1,
        task=teacher.task,
        method=method,
        code=code,
        settings=settings,
        total_timesteps=teacher.total_timesteps,
        versions=evaluation_identity(),
        device=device_description(),
        name=name,
        thought=thought,
        parent_ids=[teacher.id],
        generation=1,
        proposer=method,
        operator=method,
        meta=meta,
    )
    row["cached_from"] = cached_from
    cid = row["id"]
    update = {"candidates_count": True}
    if outcome.passed and outcome.fitness is not None:
        update |= {"best_id": cid, "best_fitness": outcome.fitness}
    archive.record_candidate(row, outcome, run_update=update)
    logger.info(
        "run %s: %s candidate %s of teacher %s archived", run.run_id, method, cid, teacher.id
    )
    run.finish("finished", "done", elapsed_s=seconds)
    return run.run_id, cid


class Student(NamedTuple):
    """What a method made of a teacher's samples."""

    code: str | None  # candidate source; None when the fit produced no program
    name: str
    thought: str
    meta: dict  # the method's own numbers (fit errors, expression): metadata, never a rank
    failure: str | None = None  # why there is no program (archived as a static failure)


def derive(
    archive: Archive,
    teacher_ref: str,
    method: str,
    fit: Callable[[Teacher, DriftSamples], Student],
    *,
    points: int,
    epsilon: float,
    config: dict,
    limits: dict | None = None,
    evaluator_factory: Callable[[CascadeSettings], Evaluator] | None = None,
    on_status: Callable[[str], None] = lambda text: None,
) -> Derived:
    """Sample the teacher in the sandbox, `fit` a student to it here, score the student with
    the teacher's cascade settings and archive it as a run of `method`.

    Args:
        archive: holds the teacher; receives the run and its one candidate.
        teacher_ref: the teacher's candidate id (or a unique prefix).
        method: the archive's `method` value ("distil", "symbolic").
        fit: `fit(teacher, samples) -> Student`, the method itself.
        points: grid points per axis of the teacher's samples.
        epsilon: the clip range passed to the teacher.
        config: the method's settings, stored with the run.
        limits: CascadeSettings limits for the sandbox (`timeout_s`, `memory_mb`, ...).
        evaluator_factory: `factory(settings) -> Evaluator` (default: one worker).
        on_status: receives one line per phase, for a progress display.

    Returns:
        The archived student's run, id and outcome, and the method's metadata.

    Raises:
        ArchiveError: no such teacher, or not a drift candidate.
        SampleFailure: the teacher could not be sampled (nothing is archived).
    """
    start = time.monotonic()
    teacher = load_teacher(archive, teacher_ref)
    cascade = teacher_settings(teacher, **(limits or {}))
    factory = evaluator_factory or (lambda settings: Evaluator(settings, workers=1))
    with factory(cascade) as evaluator:
        on_status(f"sampling teacher {teacher.id} on a {points}x{points} grid (sandboxed)")
        # a teacher that cannot be sampled is refused before any run exists
        samples = evaluator.sample(teacher.code, teacher.task, points, epsilon)
        with open_derived_run(archive, method, teacher, {"teacher": teacher.id, **config}) as run:
            logger.info(
                "%s of teacher %s: sampled on a %dx%d grid", method, teacher.id, points, points
            )
            student = fit(teacher, samples)
            cached_from = None
            if student.code is None:
                outcome = Outcome.failure("static", student.failure or f"{method}: no program")
            else:
                on_status("scoring the result with the teacher's cascade settings")
                key = eval_settings_key(teacher.task, cascade, evaluation_identity())
                (scored,) = evaluate_or_reuse(
                    archive,
                    lambda sources: evaluator.evaluate_batch(sources, teacher.task),
                    [student.code],
                    key,
                )
                outcome, cached_from = scored
            run_id, cid = record_derived(
                archive,
                method=method,
                teacher=teacher,
                code=student.code,
                outcome=outcome,
                settings=cascade,
                name=student.name,
                thought=student.thought,
                meta={"teacher": teacher.id, **student.meta},
                config={"teacher": teacher.id, **config},
                seconds=time.monotonic() - start,
                run=run,
                cached_from=cached_from,
            )
    return Derived(run_id, cid, teacher.id, teacher.fitness, outcome, student.meta)
