"""Distillation and symbolic distillation of an archived teacher, end to end: the teacher is
sampled in the sandbox, the student is scored by the real cascade with the teacher's settings
and archived with its method, its parent and the method's own numbers."""

from __future__ import annotations

import pytest

from metarl.archives.derived import Teacher, record_derived, teacher_settings
from metarl.archives.store import Archive
from metarl.blackbox.derive import distil_teacher
from metarl.blackbox.distil import DistilSettings
from metarl.evaluation.cascade import Evaluator, SampleFailure
from metarl.evaluation.outcome import Outcome
from metarl.symbolic.derive import symbolic_teacher
from metarl.symbolic.settings import SymbolicSettings
from metarl.tasks import get_task

# the settings of test_cascade.py's BASE, so the baselines trained there are reused here
LIMITS = {"timeout_s": 120, "short_timesteps": 4096}
NAN_DRIFT = """
def drift(ratio, advantage, epsilon):
    return jnp.where(ratio > 1.5, jnp.nan, 0.0 * ratio)
"""


@pytest.fixture(scope="module")
def teacher_archive(tmp_path_factory):
    """An archive holding the PPO-clip seed program, scored on the smoke suite, as a teacher."""
    path = tmp_path_factory.mktemp("derived") / "metarl.db"
    source = get_task("drift").seed_program("ppo_clip").source
    teacher = smoke_teacher(source)
    settings = teacher_settings(teacher, **LIMITS)
    with Evaluator(settings, workers=1) as evaluator:
        outcome = evaluator.evaluate_batch([source], "drift")[0]
    with Archive(path) as archive:
        _, teacher_id = record_derived(
            archive,
            method="discovery",
            teacher=teacher,
            code=source,
            outcome=outcome,
            settings=settings,
            name="ppo_clip",
            thought="the teacher",
            meta={},
            config={},
            seconds=0.0,
        )
    return path, teacher_id


def smoke_teacher(code: str) -> Teacher:
    """A program to record as a teacher: the smoke suite, one seed, 4500 steps."""
    return Teacher("seed", code, "drift", "smoke", 1, 4500, None)


def test_a_distilled_student_is_scored_like_its_teacher_and_archived_as_its_child(
    teacher_archive,
):
    path, teacher_id = teacher_archive
    settings = DistilSettings(hidden=8, steps=1500, lr_start=1e-3, lr_end=1e-4, points=32)
    with Archive(path) as archive:
        result = distil_teacher(archive, teacher_id, settings, limits=LIMITS)
        row = archive.candidate(result.candidate_id)
        teacher = archive.candidate(teacher_id)
    assert result.outcome.stage in ("full", "short"), result.outcome.reason
    assert row["method"] == "distil" and row["parent_ids"] == [teacher_id]
    # as many training seeds as the teacher, drawn afresh (the teacher's were drawn too)
    assert len(row["seeds"]) == len(teacher["seeds"]) and row["total_timesteps"] == 4500
    assert row["meta"]["hidden"] == 8 and row["meta"]["slope_error"] >= 0.0
    assert row["eval_key"] == teacher["eval_key"]  # scored exactly as the teacher was


def test_a_symbolic_fit_passes_the_cascade_with_its_expression_archived(teacher_archive):
    path, teacher_id = teacher_archive
    settings = SymbolicSettings(
        points=32, population_size=200, generations=30, max_time_s=60, rng_seed=1
    )
    with Archive(path) as archive:
        result = symbolic_teacher(archive, teacher_id, settings, limits=LIMITS)
        row = archive.candidate(result.candidate_id)
    assert row["status"] == "passed", row["reason"]
    assert row["method"] == "symbolic" and row["parent_ids"] == [teacher_id]
    assert row["meta"]["size"] > 0 and row["meta"]["expression"]
    assert row["meta"]["value_error"] < 1.0  # PPO-clip's drift values have variance ~30


def test_a_teacher_that_breaks_on_the_grid_is_refused_with_its_reason(teacher_archive):
    path, _ = teacher_archive
    with Archive(path) as archive:
        teacher = smoke_teacher(NAN_DRIFT)
        settings = teacher_settings(teacher, **LIMITS)
        _, bad_id = record_derived(
            archive,
            method="discovery",
            teacher=teacher,
            code=NAN_DRIFT,
            outcome=Outcome.failure("probes", "not scored here"),
            settings=settings,
            name="nan",
            thought="",
            meta={},
            config={},
            seconds=0.0,
        )
        runs_before = len(archive.runs())
        with pytest.raises(SampleFailure, match="non-finite"):
            distil_teacher(archive, bad_id, DistilSettings(hidden=4, steps=10, points=16))
        assert len(archive.runs()) == runs_before  # nothing half-written
