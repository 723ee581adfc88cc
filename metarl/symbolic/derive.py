"""`metarl symbolic`: a closed form for an archived drift candidate (the teacher).

The teacher (an ES export, a distilled network, an LLM's long program) is sampled on the grid
inside the sandbox; the expression is searched here (symbolic/fit.py), written as candidate
source and scored by the cascade exactly as the teacher was scored, then archived as a
`symbolic` run whose one candidate has the teacher as parent, with its expression, size and
fit errors as metadata (archives/derived.py). An expression that is not a finite candidate is
archived as failed, with the reason.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from metarl.archives.derived import Derived, Student, Teacher, derive
from metarl.archives.store import Archive
from metarl.rl.lpo import DriftSamples
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
    evaluator_factory: Callable | None = None,
    on_status: Callable[[str], None] = lambda text: None,
) -> Derived:
    """Fit a closed form to archived candidate `teacher_ref` and archive it as a candidate.

    Args:
        archive: holds the teacher; receives the `symbolic` run and its candidate.
        teacher_ref: the teacher's candidate id (or a unique prefix).
        settings: backend, objective, operators and search budget.
        limits, evaluator_factory, on_status: as for `archives.derived.derive`.

    Returns:
        The archived candidate's run, id, outcome, expression and errors.

    Raises:
        ArchiveError: no such teacher, or not a drift candidate.
        SampleFailure: the teacher could not be sampled (its stage and reason).
    """

    def fit(teacher: Teacher, samples: DriftSamples) -> Student:
        on_status(
            f"searching expressions with {settings.backend} ({settings.objective} objective, "
            f"at most {settings.max_time_s} s)"
        )
        meta: dict = {"backend": settings.backend, "objective": settings.objective}
        name = f"symbolic-{teacher.id}"
        try:
            fitted = fit_drift(samples, settings)
        except SymbolicError as error:
            thought = f"no closed form for {teacher.id}"
            return Student(None, name, thought, meta, failure=f"symbolic fit: {error}")
        meta |= {
            "expression": fitted.expression,
            "size": fitted.size,
            "depth": fitted.depth,
            "value_error": fitted.value_error,
            "slope_error": fitted.slope_error,
            "seconds": fitted.seconds,
        }
        thought = f"closed form of {teacher.id}: {fitted.expression}"
        return Student(fitted.source, name, thought, meta)

    result = derive(
        archive,
        teacher_ref,
        "symbolic",
        fit,
        points=settings.points,
        epsilon=EPSILON,
        config=dataclasses.asdict(settings),
        limits=limits,
        evaluator_factory=evaluator_factory,
        on_status=on_status,
    )
    logger.info("symbolic fit of %s: %s", result.teacher_id, result.outcome.fitness)
    return result
