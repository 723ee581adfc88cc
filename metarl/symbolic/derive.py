"""`metarl symbolic`: a closed form for an archived drift candidate (the teacher).

The teacher (an ES export, a distilled network, an LLM's long program) is sampled on the grid
inside the sandbox; the expression is searched here (symbolic/fit.py), written as candidate
source and scored by the cascade exactly as the teacher was scored, then archived as a
`symbolic` run whose one candidate has the teacher as parent, with its expression, size and
fit errors as metadata. An expression that is not a finite candidate is archived as failed,
with the reason.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable

from metarl.archives.derived import Derived, load_teacher, record_derived, teacher_settings
from metarl.archives.store import Archive
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.outcome import Outcome
from metarl.symbolic.expression import SymbolicError
from metarl.symbolic.fit import EPSILON, fit_drift
from metarl.symbolic.settings import SymbolicSettings

logger = logging.getLogger(__name__)


def symbolic_teacher(
    archive: Archive,
    teacher_ref: str,
    settings: SymbolicSettings = SymbolicSettings(),
    *,
    limits: dict | None = None,
    evaluator_factory: Callable[..., Evaluator] | None = None,
    on_status: Callable[[str], None] = lambda text: None,
) -> Derived:
    """Fit a closed form to archived candidate `teacher_ref` and archive it as a candidate.

    Args:
        archive: holds the teacher; receives the `symbolic` run and its candidate.
        teacher_ref: the teacher's candidate id (or a unique prefix).
        settings: backend, objective, operators and search budget.
        limits: CascadeSettings limits for the sandbox (`timeout_s`, `memory_mb`, ...).
        evaluator_factory: `factory(settings) -> Evaluator` (default: one worker).
        on_status: receives one line per phase, for a progress display.

    Returns:
        The archived candidate's run, id, outcome, expression and errors.

    Raises:
        ArchiveError: no such teacher, or not a drift candidate.
        SampleFailure: the teacher could not be sampled (its stage and reason).
    """
    start = time.monotonic()
    teacher = load_teacher(archive, teacher_ref)
    cascade = teacher_settings(teacher, **(limits or {}))
    factory = evaluator_factory or (lambda s: Evaluator(s, workers=1))
    with factory(cascade) as evaluator:
        on_status(f"sampling teacher {teacher.id} on a {settings.points}x{settings.points} grid")
        samples = evaluator.sample(teacher.code, "drift", settings.points, EPSILON)
        on_status(
            f"searching expressions with {settings.backend} ({settings.objective} objective, "
            f"at most {settings.max_time_s} s)"
        )
        meta: dict = {"teacher": teacher.id, "backend": settings.backend}
        meta["objective"] = settings.objective
        try:
            fit = fit_drift(samples, settings)
        except SymbolicError as error:
            code, outcome = None, Outcome.failure("static", f"symbolic fit: {error}")
            name, thought = f"symbolic-{teacher.id}", f"no closed form for {teacher.id}"
        else:
            code = fit.source
            meta |= {
                "expression": fit.expression,
                "size": fit.size,
                "depth": fit.depth,
                "value_error": fit.value_error,
                "slope_error": fit.slope_error,
                "seconds": fit.seconds,
            }
            name, thought = (
                f"symbolic-{teacher.id}",
                f"closed form of {teacher.id}: {fit.expression}",
            )
            on_status("scoring the expression with the teacher's cascade settings")
            outcome = evaluator.evaluate_batch([code], "drift")[0]
    run_id, cid = record_derived(
        archive,
        method="symbolic",
        teacher=teacher,
        code=code,
        outcome=outcome,
        settings=cascade,
        name=name,
        thought=thought,
        meta=meta,
        config={"teacher": teacher.id, **dataclasses.asdict(settings)},
        seconds=time.monotonic() - start,
    )
    logger.info("symbolic fit of %s archived as %s: %s", teacher.id, cid, outcome.fitness)
    return Derived(run_id, cid, teacher.id, teacher.fitness, outcome, meta)
