"""Black-box distillation: sampling a drift candidate in the sandbox, and fitting a network.

`Evaluator.sample` runs the candidate in a real bubblewrap tracer and must give exactly what
`rl.lpo.sample_drift` gives in-process; `blackbox.distil` must fit a teacher of another width
and export a student the cascade accepts.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metarl.blackbox.distil import DistilSettings, distil, distillation_errors, initial_params
from metarl.blackbox.export import lpo_source
from metarl.evaluation.cascade import CascadeSettings, Evaluator, SampleFailure
from metarl.evaluation.sandbox import WorkerProcess, WorkerResult
from metarl.evaluation.settings import SandboxLimits
from metarl.evaluation.stages import sample_candidate
from metarl.evaluation.static_check import check_task_source
from metarl.evaluation.tracer_results import read_samples
from metarl.rl.components import ppo_clip_drift
from metarl.rl.lpo import drift_grid, init_params, lpo_drift, sample_drift
from metarl.tasks import get_task

BASE = dict(
    suite="smoke", seeds=1, seed_values=[0], total_timesteps=4500, timeout_s=60, probe_seed=0
)
NAN_DRIFT = (
    "def drift(ratio, advantage, epsilon):\n"
    "    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)\n"
    "    penalty = jax.nn.relu((ratio - clipped) * advantage)\n"
    "    return jnp.where(ratio > 4.0, jnp.nan, penalty)\n"
)


@pytest.fixture(scope="module")
def evaluator(metarl_cache):
    # no pre-warmed spares: sampling needs one tracer per call, and never a trainer
    with Evaluator(CascadeSettings(**BASE), workers=1, prewarm=False) as evaluator:
        yield evaluator


# --- sampling in the sandbox ------------------------------------------------------------------
def test_sampling_the_ppo_clip_seed_in_the_sandbox_matches_sampling_it_in_process(evaluator):
    source = get_task("drift").seed_program("ppo_clip").source
    samples = evaluator.sample(source, "drift")  # the default 128 x 128 grid
    expected = sample_drift(ppo_clip_drift, drift_grid(128), 0.2)
    for name in ("ratio", "advantage", "value", "slope"):
        got = getattr(samples, name)
        assert got.dtype == np.float32 and got.shape == (128 * 128,)
        np.testing.assert_allclose(got, getattr(expected, name), rtol=1e-6, err_msg=name)
    assert np.any(samples.slope != 0.0)  # the clip is active somewhere on the grid


def test_a_drift_with_nan_values_is_refused_naming_where(evaluator):
    with pytest.raises(SampleFailure) as failure:
        evaluator.sample(NAN_DRIFT, points=32)
    assert failure.value.stage == "sample"
    assert "non-finite drift value (nan) at ratio=" in failure.value.reason
    assert "\n" not in str(failure.value)


def test_forbidden_code_stops_at_the_static_check_without_a_worker(evaluator):
    source = (
        "def drift(ratio, advantage, epsilon):\n"
        "    open('/tmp/metarl-distil-was-here', 'w')\n"
        "    return jax.nn.relu((ratio - 1.0) * advantage)\n"
    )
    start = time.perf_counter()
    with pytest.raises(SampleFailure) as failure:
        evaluator.sample(source)
    assert time.perf_counter() - start < 1.0  # never left this process
    assert failure.value.stage == "static" and "`open` is not allowed" in failure.value.reason


def test_an_endless_loop_is_stopped_by_the_tracer_time_limit(metarl_cache):
    source = (
        "def drift(ratio, advantage, epsilon):\n    while True:\n        pass\n    return ratio\n"
    )
    settings = CascadeSettings(**{**BASE, "trace_timeout_s": 3.0})
    with Evaluator(settings, workers=1, prewarm=False) as evaluator:
        start = time.perf_counter()
        with pytest.raises(SampleFailure) as failure:
            evaluator.sample(source)
        elapsed = time.perf_counter() - start
    assert failure.value.stage == "sample"
    assert "timed out after 3 s in stage sample" in failure.value.reason
    assert elapsed < 3.0 + 30.0  # the limit, plus one worker's start-up on a busy machine


@pytest.mark.parametrize(
    "payload, kind, expected",
    [
        ({"ok": True, "value": [0.0] * 3, "slope": [0.0] * 4}, "sample", "not 4 floats"),
        ({"ok": True, "value": [0.0] * 4, "slope": [0.0] * 3 + [True]}, "sample", "not 4 floats"),
        ({"ok": True, "value": [0.0] * 3 + [1e300], "slope": [0.0] * 4}, "sample", "non-finite"),
        ({"ok": True, "value": [0.0] * 3 + [None], "slope": [0.0] * 4}, "sample", "not 4 floats"),
        ({"ok": 1, "value": [0.0] * 4, "slope": [0.0] * 4}, "sample", "malformed result"),
        ({"ok": True, "value": [0.0] * 4, "slope": [0.0] * 4}, "trace", "malformed result"),
        ({"ok": False, "reason": "bad\n\x1b[32mPASSED"}, "sample", "bad \\x1b[32mPASSED"),
        ({"error": "ValueError: x"}, "error", "broke its tracer: ValueError: x"),
    ],
)
def test_the_parent_checks_everything_a_tracer_returns(payload, kind, expected):
    run = WorkerResult(status="ok", result={"event": "result", "kind": kind, "payload": payload})
    with pytest.raises(SampleFailure) as failure:
        read_samples(run, 4)
    assert failure.value.stage == "sample"
    assert expected in failure.value.reason and "\n" not in failure.value.reason


def test_a_trainer_never_runs_candidate_python():
    source = get_task("drift").seed_program("ppo_clip").source
    worker = WorkerProcess(SandboxLimits(timeout_s=30), role="trainer")
    job = {"kind": "sample", "task": "drift", "source": source, "points": 4, "epsilon": 0.2}
    run = worker.run(job, timeout_s=30)
    assert run.status == "ok" and run.result["kind"] == "error"
    assert "a trainer does not run 'sample' jobs" in run.result["payload"]["error"]


def test_only_candidates_of_a_distillable_task_can_be_sampled(evaluator):
    assert get_task("drift").distillable and not get_task("optimizer").distillable
    reason = sample_candidate(get_task("optimizer"), "", 8, 0.2)["reason"]
    assert "the optimizer task cannot be sampled (not distillable)" in reason
    with pytest.raises(ValueError):
        evaluator.sample("", "optimizer")


# --- distillation -----------------------------------------------------------------------------
# A random width-64 LPO teacher into a width-16 student; a 10x higher learning rate than the
# paper's keeps this at 2,000 steps (~3 s). Measured: slope MSE 4.04 -> 0.036 (112x).
TEACHER = init_params(jax.random.PRNGKey(7), 64)
SETTINGS = DistilSettings(hidden=16, steps=2000, batch_size=512, lr_start=1e-3, lr_end=1e-4)


@pytest.fixture(scope="module")
def distilled():
    grid = drift_grid(64)
    samples = sample_drift(functools.partial(lpo_drift, TEACHER), grid, 0.2)
    return grid, samples, distil(samples, SETTINGS)


def test_distilling_a_network_into_another_width_cuts_the_slope_error(distilled):
    _, samples, result = distilled
    _, initial_slope_error = distillation_errors(initial_params(SETTINGS), samples)
    assert result.slope_error < initial_slope_error / 20  # measured: 112x
    assert result.value_error < 0.1  # measured 0.010 (1.14 at initialisation)
    assert result.losses.shape == (2000 // SETTINGS.log_every,)
    assert result.losses[-1] < result.losses[0] / 20
    assert jax.tree.leaves(result.params)[0].shape[-1] == 16


def test_the_exported_student_passes_the_static_check_and_computes_the_same_drift(distilled):
    grid, _, result = distilled
    source = lpo_source(result.params, "distilled student")
    report = check_task_source(source, get_task("drift"))
    assert report.ok, report.reason
    namespace = {"jax": jax, "jnp": jnp}
    exec(source, namespace)  # generated from trusted weights, not a candidate
    exported = namespace["drift"](grid.ratio, grid.advantage, 0.2)
    expected = lpo_drift(result.params, grid.ratio, grid.advantage, 0.2)
    np.testing.assert_allclose(np.asarray(exported), np.asarray(expected), rtol=1e-6, atol=0)


def test_distil_refuses_bad_settings_and_samples():
    samples = sample_drift(ppo_clip_drift, drift_grid(4), 0.2)
    with pytest.raises(ValueError, match="objective"):
        distil(samples, DistilSettings(objective="kl"))
    broken = samples._replace(value=np.full_like(samples.value, np.nan))
    with pytest.raises(ValueError, match="finite"):
        distil(broken, DistilSettings(steps=1))
