"""`metarl distil`: an archived drift candidate (the teacher) distilled into an LPO network.

The teacher is sampled on the distillation grid inside the sandbox (any candidate, an LLM's
program included, may be hostile); the student is fitted here (blackbox/distil.py), exported
as candidate source (blackbox/export.py) and scored by the cascade exactly as the teacher was
scored (same suite, seeds and budget), then archived as a `distil` run whose one candidate has
the teacher as its parent (archives/derived.py). The fit errors are metadata, never a rank.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from metarl.archives.derived import Derived, Student, Teacher, derive
from metarl.archives.store import Archive
from metarl.blackbox.distil import DistilSettings, distil
from metarl.blackbox.export import ExportError, lpo_source
from metarl.rl.lpo import DriftSamples

logger = logging.getLogger(__name__)


def distil_teacher(
    archive: Archive,
    teacher_ref: str,
    settings: DistilSettings = DistilSettings(),
    *,
    limits: dict | None = None,
    evaluator_factory: Callable | None = None,
    on_status: Callable[[str], None] = lambda text: None,
) -> Derived:
    """Distil archived candidate `teacher_ref` into an LPO network and archive the student.

    Args:
        archive: holds the teacher; receives the `distil` run and its candidate.
        teacher_ref: the teacher's candidate id (or a unique prefix).
        settings: the student's width, steps, objective, learning rates and grid.
        limits, evaluator_factory, on_status: as for `archives.derived.derive`.

    Returns:
        The archived student's run, id, outcome and fit errors.

    Raises:
        ArchiveError: no such teacher, or not a drift candidate.
        SampleFailure: the teacher could not be sampled (its stage and reason).
    """

    def fit(teacher: Teacher, samples: DriftSamples) -> Student:
        on_status(f"fitting a width-{settings.hidden} network ({settings.steps} Adam steps)")
        result = distil(samples, settings)
        meta = {
            "objective": settings.objective,
            "hidden": settings.hidden,
            "steps": settings.steps,
            "value_error": result.value_error,
            "slope_error": result.slope_error,
            "final_loss": float(result.losses[-1]) if len(result.losses) else None,
        }
        title = f"distilled from {teacher.id} into width {settings.hidden} ({settings.objective})"
        name = f"distil-{teacher.id}-w{settings.hidden}"
        try:
            return Student(lpo_source(result.params, title), name, title, meta)
        except ExportError as error:
            return Student(None, name, title, meta, failure=str(error))

    result = derive(
        archive,
        teacher_ref,
        "distil",
        fit,
        points=settings.points,
        epsilon=settings.epsilon,
        config=dataclasses.asdict(settings),
        limits=limits,
        evaluator_factory=evaluator_factory,
        on_status=on_status,
    )
    logger.info(
        "distilled %s into %s: %s", result.teacher_id, result.candidate_id, result.outcome.fitness
    )
    return result
