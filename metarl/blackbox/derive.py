"""`metarl distil`: an archived drift candidate (the teacher) distilled into an LPO network.

The teacher is sampled on the distillation grid inside the sandbox (any candidate, an LLM's
program included, may be hostile); the student is fitted here (blackbox/distil.py), exported
as candidate source (blackbox/export.py) and scored by the cascade exactly as the teacher was
scored (same suite, seeds and budget), then archived as a `distil` run whose one candidate has
the teacher as its parent. The fit errors are metadata, never a rank.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable

from metarl.archives.derived import Derived, load_teacher, record_derived, teacher_settings
from metarl.archives.store import Archive
from metarl.blackbox.distil import DistilSettings, distil
from metarl.blackbox.export import ExportError, lpo_source
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.outcome import Outcome

logger = logging.getLogger(__name__)


def distil_teacher(
    archive: Archive,
    teacher_ref: str,
    settings: DistilSettings = DistilSettings(),
    *,
    limits: dict | None = None,
    evaluator_factory: Callable[..., Evaluator] | None = None,
    on_status: Callable[[str], None] = lambda text: None,
) -> Derived:
    """Distil archived candidate `teacher_ref` into an LPO network and archive the student.

    Args:
        archive: holds the teacher; receives the `distil` run and its candidate.
        teacher_ref: the teacher's candidate id (or a unique prefix).
        settings: the student's width, steps, objective, learning rates and grid.
        limits: CascadeSettings limits for the sandbox (`timeout_s`, `memory_mb`, ...).
        evaluator_factory: `factory(settings) -> Evaluator` (default: one worker).
        on_status: receives one line per phase, for a progress display.

    Returns:
        The archived student's run, id, outcome and fit errors.

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
        samples = evaluator.sample(teacher.code, "drift", settings.points, settings.epsilon)
        on_status(f"fitting a width-{settings.hidden} network ({settings.steps} Adam steps)")
        result = distil(samples, settings)
        meta = {
            "teacher": teacher.id,
            "objective": settings.objective,
            "hidden": settings.hidden,
            "steps": settings.steps,
            "value_error": result.value_error,
            "slope_error": result.slope_error,
            "final_loss": float(result.losses[-1]) if len(result.losses) else None,
        }
        title = f"distilled from {teacher.id} into width {settings.hidden} ({settings.objective})"
        try:
            code = lpo_source(result.params, title)
        except ExportError as error:
            code, outcome = None, Outcome.failure("static", str(error))
        else:
            on_status("scoring the student with the teacher's cascade settings")
            outcome = evaluator.evaluate_batch([code], "drift")[0]
    run_id, cid = record_derived(
        archive,
        method="distil",
        teacher=teacher,
        code=code,
        outcome=outcome,
        settings=cascade,
        name=f"distil-{teacher.id}-w{settings.hidden}",
        thought=title,
        meta=meta,
        config={"teacher": teacher.id, **dataclasses.asdict(settings)},
        seconds=time.monotonic() - start,
    )
    logger.info("distilled %s into %s: %s", teacher.id, cid, outcome.fitness)
    return Derived(run_id, cid, teacher.id, teacher.fitness, outcome, meta)
