"""The cascade's sandboxed stages, called in-process as plain functions (no worker, no sandbox).

Production runs the same functions in bubblewrap workers (tests/test_sandbox.py and
tests/test_cascade.py cover that path); here they are checked directly, which is fast and
shows that a stage's verdict depends only on its typed inputs.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import replace

import numpy as np
import pytest
from test_seed_secrecy import POOL, leaked

from metarl.discovery.proposers.llm.prompts import feedback_text, outcome_summary
from metarl.evaluation import stages
from metarl.evaluation.settings import CascadeSettings, plan_runs
from metarl.platform import backend
from metarl.tasks import get_task

DRIFT = get_task("drift")
PPO_CLIP = DRIFT.seed_program("ppo_clip").source
PLATFORM = backend()
# the short run is the first 16384 steps (a segment) of the 32768-step full run: long enough
# for the baseline to be far above a random policy there (128 vs 24 mean return), so the
# threshold separates learners from non-learners
SETTINGS = CascadeSettings(
    suite="smoke",
    seeds=1,
    seed_values=[0],
    total_timesteps=32768,
    short_timesteps=16384,
    probe_seed=0,
)


@pytest.fixture(scope="module")
def references() -> dict[str, dict]:
    """The baseline program's runs on every planned segment, as evaluate_artifact wants them."""
    wanted = [entry.key for entry in plan_runs(SETTINGS)]
    baselines = stages.train_baselines(DRIFT, SETTINGS, wanted, PLATFORM)
    assert sorted(run["key"] for run in baselines.runs) == sorted(set(wanted))
    return {
        run["key"]: {
            "baseline_mean": float(np.mean(run["final_returns"])),
            "random_mean": baselines.random[run["env"]],
        }
        for run in baselines.runs
    }


@pytest.fixture(scope="module")
def ppo_clip_artifact() -> dict:
    traced = stages.trace_candidate(DRIFT, PPO_CLIP, probe_seed=0, platform=PLATFORM)
    assert traced.ok, traced.reason
    return traced.artifact


def test_trace_exports_an_honest_candidate_with_no_warnings(ppo_clip_artifact):
    assert set(ppo_clip_artifact) == {"epsilon=0.2"}
    assert stages.trace_candidate(DRIFT, PPO_CLIP, 1, PLATFORM).to_dict()["warnings"] == []


def test_trace_stops_a_negative_drift_with_the_probes_reason():
    source = "def drift(ratio, advantage, epsilon):\n    return (ratio - 1.0) * advantage\n"
    traced = stages.trace_candidate(DRIFT, source, probe_seed=0, platform=PLATFORM)
    assert not traced.ok and traced.artifact is None
    assert "drift is negative" in traced.reason


def test_trace_reports_a_module_that_does_not_define_the_function():
    traced = stages.trace_candidate(DRIFT, "x = 1\n", probe_seed=0, platform=PLATFORM)
    assert not traced.ok
    assert traced.reason == "the candidate does not define a function `drift`"


def test_the_baseline_program_scores_exactly_one_through_every_stage(ppo_clip_artifact, references):
    events = []
    outcome = stages.evaluate_artifact(
        DRIFT,
        ppo_clip_artifact,
        SETTINGS,
        references,
        probe_seed=7,
        platform=PLATFORM,
        report=lambda event, **data: events.append((event, data)),
    )
    assert outcome.passed and outcome.stage == "full", outcome.reason
    assert [s.stage for s in outcome.env_scores] == ["short", "full"]
    assert [s.normalised for s in outcome.env_scores] == [1.0, 1.0]
    assert outcome.fitness == 1.0
    stage_events = [data["stage"] for event, data in events if event == "stage"]
    assert stage_events == ["probes", "short", "full"]
    assert ("fingerprint", {"index": 0, "fingerprint": outcome.fingerprint}) in events
    assert {"load_artifact", "probes", "short", "full", "compile", "run"} <= set(outcome.timings)


def test_a_short_run_below_the_threshold_stops_at_short_with_its_numbers(
    ppo_clip_artifact, references
):
    strict = CascadeSettings(**{**SETTINGS.job_settings(), "short_run_threshold": 2.0})
    outcome = stages.evaluate_artifact(DRIFT, ppo_clip_artifact, strict, references, 7, PLATFORM)
    assert not outcome.passed and outcome.stage == "short"
    assert outcome.reason.startswith("short run: normalised score 1.000 on CartPole-v1")
    assert outcome.reason.endswith("is below the threshold 2")
    assert outcome.fitness is None


def test_a_truncated_artifact_is_refused_before_any_training(ppo_clip_artifact, references):
    # (an artifact carries no signature: what protects the trainer is that whatever arrives is
    # deserialised and verified; a program that still verifies after tampering is legitimate)
    blob = base64.b64decode(ppo_clip_artifact["epsilon=0.2"])
    tampered = {"epsilon=0.2": base64.b64encode(blob[: len(blob) // 2]).decode()}
    outcome = stages.evaluate_artifact(DRIFT, tampered, SETTINGS, references, 7, PLATFORM)
    assert not outcome.passed and outcome.stage == "probes"
    assert outcome.reason.startswith("the exported program was refused")
    assert outcome.env_scores == [] and "compile" not in outcome.timings


def test_an_artifact_with_the_wrong_variants_is_refused(ppo_clip_artifact, references):
    renamed = {"epsilon=0.3": ppo_clip_artifact["epsilon=0.2"]}
    outcome = stages.evaluate_artifact(DRIFT, renamed, SETTINGS, references, 7, PLATFORM)
    assert not outcome.passed and outcome.stage == "probes"
    assert "refused" in outcome.reason


FROZEN = """
def drift(ratio, advantage, epsilon):
    # a penalty so steep the policy barely moves: about a random policy's return
    return 1e4 * jnp.square(ratio - 1.0)
"""
OVERFLOWING = """
def optimizer(grad, param, momentum, state, step, progress, lr):
    # fine for the probes' first steps, overflows float32 after ~60 optimizer steps
    return -lr * grad * 10.0 ** (step - 20.0), state
"""


def artifact_of(source: str, task=DRIFT) -> dict:
    traced = stages.trace_candidate(task, source, probe_seed=0, platform=PLATFORM)
    assert traced.ok, traced.reason
    return traced.artifact


def test_a_batch_stops_each_bad_candidate_alone_and_scores_the_others(
    ppo_clip_artifact, references
):
    batch = [
        artifact_of(FROZEN),
        ppo_clip_artifact,
        {"epsilon=0.2": "not base64"},
    ]
    events = []
    outcomes = stages.evaluate_artifacts(
        DRIFT,
        batch,
        SETTINGS,
        references,
        [7] * len(batch),
        PLATFORM,
        report=lambda event, **data: events.append((event, data)),
    )
    frozen, honest, garbled = outcomes
    assert honest.passed and honest.fitness == 1.0, honest.reason
    assert not frozen.passed and frozen.stage == "short", frozen.reason
    assert frozen.reason.startswith("short run: normalised score")
    assert not garbled.passed and garbled.stage == "probes" and "refused" in garbled.reason
    # the bad ones stopped where they failed: only the honest one reached the full run
    full = [data["index"] for event, data in events if data.get("stage") == "full"]
    assert full == [1]


def test_known_fingerprints_stop_a_duplicate_before_training(ppo_clip_artifact, references):
    first = stages.evaluate_artifact(DRIFT, ppo_clip_artifact, SETTINGS, references, 7, PLATFORM)
    (again,) = stages.evaluate_artifacts(
        DRIFT,
        [ppo_clip_artifact],
        SETTINGS,
        references,
        [8],
        PLATFORM,
        known_fingerprints={first.fingerprint: "cand-1"},
    )
    assert not again.passed and again.duplicate_of == "cand-1"
    assert again.reason == "behaves identically to candidate cand-1"
    assert "compile" not in again.timings


def test_a_nan_in_training_fails_its_candidate_alone_and_no_text_names_a_seed(caplog):
    """The trainer's whole path (baselines, probes on the artifact, training, scoring) on a
    training seed of a recognisable value: the candidate that goes NaN fails alone, and no
    reason, warning, output, proposer feedback or log record carries a seed's value (the
    reason names it by position: tests/test_seed_secrecy.py)."""
    caplog.set_level(logging.DEBUG, logger="metarl")
    settings = replace(SETTINGS, seed_values=POOL[:1])
    task = get_task("optimizer")
    wanted = [entry.key for entry in plan_runs(settings)]
    baselines = stages.train_baselines(task, settings, wanted, PLATFORM)
    references = {
        run["key"]: {
            "baseline_mean": float(np.mean(run["final_returns"])),
            "random_mean": baselines.random[run["env"]],
        }
        for run in baselines.runs
    }
    batch = [artifact_of(OVERFLOWING, task), artifact_of(task.baseline_program().source, task)]
    overflowing, adam = stages.evaluate_artifacts(
        task, batch, settings, references, [7, 7], PLATFORM
    )
    assert not overflowing.passed and overflowing.stage == "short"
    assert overflowing.reason.startswith("training produced NaN/inf at update")
    assert "(training seed " in overflowing.reason
    assert adam.passed and adam.fitness == 1.0, adam.reason
    assert adam.env_scores[-1].seeds == POOL[:1]  # recorded where it belongs
    for outcome in (overflowing, adam):
        texts = [
            outcome.reason or "",
            *outcome.warnings,
            outcome.stdout,
            outcome_summary(outcome),
            feedback_text(outcome, "x", "r1-1"),
        ]
        assert [leaked(text) for text in texts] == [[]] * len(texts)
    assert leaked("\n".join(record.getMessage() for record in caplog.records)) == []
