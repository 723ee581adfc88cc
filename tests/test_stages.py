"""The cascade's sandboxed stages, called in-process as plain functions (no worker, no sandbox).

Production runs the same functions in bubblewrap workers (tests/test_sandbox.py and
tests/test_cascade.py cover that path); here they are checked directly, which is fast and
shows that a stage's verdict depends only on its typed inputs.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest

from metarl.evaluation import stages
from metarl.evaluation.settings import CascadeSettings, plan_runs
from metarl.platform import backend
from metarl.tasks import get_task

DRIFT = get_task("drift")
PPO_CLIP = DRIFT.seed_program("ppo_clip").source
PLATFORM = backend()
# the short run (2048 steps) is a separate first segment; the full run is 4096 steps
SETTINGS = CascadeSettings(
    suite="smoke", seeds=1, total_timesteps=4096, short_timesteps=2048, probe_seed=0
)


@pytest.fixture(scope="module")
def references() -> dict[str, dict]:
    """The baseline program's runs on every planned config, as evaluate_artifact wants them."""
    wanted = [entry.config.config_hash() for entry in plan_runs(SETTINGS)]
    baselines = stages.train_baselines(DRIFT, SETTINGS, wanted, PLATFORM)
    assert sorted(run["config_hash"] for run in baselines.runs) == sorted(set(wanted))
    return {
        run["config_hash"]: {
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
    assert ("fingerprint", {"fingerprint": outcome.fingerprint}) in events
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
