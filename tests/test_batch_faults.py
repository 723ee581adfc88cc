"""One candidate cannot break its batch (evaluation/batch_training.py, evaluation/preflight.py),
end to end through the sandboxed cascade, with hostile candidates in batches of 4:

- a **batch breaker**: what a compromised tracer can send, PPO-clip exported with a forged
  `shape_assertion` (at most 127 elements) on its VJP. The probes differentiate it on 64
  elements and pass; the trainer calls its VJP on 128 per seed, where it cannot compile, which
  used to fail the shared compile and with it the whole batch;
- a **training-only hang**: an optimizer rule of 200,000 sequential steps per call, a moment on
  the probes' few elements and minutes on a network's thousands, i.e. a trainer that stops
  answering only in training (a loop gated on *values* cannot reach the trainer: its exported
  program needs a reduction over the batch axis, refused by the verification, see
  tests/bad_candidates/value_gated_hang.py).

Each is blamed alone, with its own reason, in at most ceil(log2 4) + 1 = 3 extra trainer jobs
(counted at the executor), the hang costs one limit (one stopped or timed-out job), its GRPO
reward is its stage's failure reward (not None), and the three others score bit for bit as they
do alone. A malformed result from the trusted trainer is an evaluator fault, typed as such.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import pytest
from jax import export as jax_export
from jax._src.export._export import _module_to_bytecode
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir

from metarl.evaluation.cascade import CascadeSettings, Evaluator
from metarl.evaluation.outcome import evaluator_fault
from metarl.evaluation.preflight import baseline_artifact, call_sites, preflight
from metarl.evaluation.settings import plan_runs
from metarl.grpo.rewards import REWARDS, reward_of
from metarl.rl.verifier import artifact
from metarl.tasks import get_task

pytestmark = pytest.mark.timeout(1200)

BASE = dict(
    suite="smoke",
    seeds=1,
    seed_values=[0],
    total_timesteps=4500,
    short_timesteps=4096,
    timeout_s=60,
    probe_seed=0,
    train_timeout_floor_s=40.0,  # each candidate's own limit: honest ones need ~5 s (x3 loaded)
    train_timeout_factor=1.0,
)
DRIFT, OPTIMIZER = get_task("drift"), get_task("optimizer")
# the seeds with a local renamed: no copy of the task's baseline program by source, so they
# train in the batch's one job (the baseline program itself is scored from the baseline's runs)
PPO_CLIP = DRIFT.seed_program("ppo_clip").source.replace("clipped_ratio", "kept")
ADAM = OPTIMIZER.seed_program("adam").source.replace("new_state", "next_state")
WIDE = PPO_CLIP.replace("1.0 - epsilon, 1.0 + epsilon", "1.0 - 1.5 * epsilon, 1.0 + 1.5 * epsilon")
BREAKER = PPO_CLIP + "# the tracer that exports this one is compromised (forged-breaker)\n"
MOMENTUM = """
def optimizer(grad, param, momentum, state, step, progress, lr):
    return -400.0 * lr * (0.1 * grad + 0.9 * momentum[0]), state
"""
HANG = """
def optimizer(grad, param, momentum, state, step, progress, lr):
    # 200,000 sequential steps per call: a moment on the probes' few elements, many minutes
    # on a network's thousands of parameters, hundreds of calls in training
    spin = lax.fori_loop(0, 200000, lambda i, x: jnp.sin(x) + grad, grad)
    return -lr * grad + 0.0 * spin, state
"""
MAX_EXTRA_JOBS = math.ceil(math.log2(4)) + 1


def forged_breaker() -> dict:
    """PPO-clip's artifact whose VJP asserts at most 127 elements (a forged shape assertion:
    JAX's own constraints would need arithmetic on the size, which the verifier refuses)."""
    (n,) = jax_export.symbolic_shape("n")
    spec = jax.ShapeDtypeStruct((n,), jnp.float32)

    def ppo_clip(ratio, advantage):
        return jax.nn.relu((ratio - jnp.clip(ratio, 0.8, 1.2)) * advantage)

    exported = jax_export.export(jax.jit(jax.vmap(ppo_clip)), platforms=["cpu"])(spec, spec)
    vjp = exported.vjp()
    lines = vjp.mlir_module().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "get_dimension_size %arg2" in line)
    lines.insert(
        at + 1,
        "    %brk_c = stablehlo.constant dense<127> : tensor<i32>\n"
        "    %brk_b = stablehlo.compare LE, %0, %brk_c, SIGNED : "
        "(tensor<i32>, tensor<i32>) -> tensor<i1>\n"
        "    stablehlo.custom_call @shape_assertion(%brk_b, %0) {api_version = 2 : i32, "
        'error_message = "at most 127 elements, not {0}", has_side_effect = true} : '
        "(tensor<i1>, tensor<i32>) -> ()\n",
    )
    with mlir.make_ir_context():
        module = _module_to_bytecode(ir.Module.parse("".join(lines)))
    forged_vjp = dataclasses.replace(vjp, mlir_module_serialized=module)
    forged = dataclasses.replace(exported, _get_vjp=lambda _: forged_vjp)
    return artifact.encode({"epsilon=0.2": bytes(forged.serialize(vjp_order=1))})


class Watched:
    """The evaluator's executor, watched: every trainer job and its status are recorded, a
    tracer whose source carries the breaker's marker is compromised (its artifact replaced by
    the forged one), and with `mangle` the trainer's result is malformed (a trusted fault)."""

    def __init__(self, inner, forged: dict):
        self.inner, self.forged = inner, forged
        self.trainer_jobs: list[tuple[dict, str]] = []
        self.mangle = False

    @property
    def slots(self) -> int:
        return self.inner.slots

    def run(self, role, job, limit, on_event=None):
        result = self.inner.run(role, job, limit, on_event)
        if role == "tracer" and "forged-breaker" in job.get("source", "") and result.status == "ok":
            result.result["payload"]["artifact"] = self.forged
        if role == "trainer" and job.get("kind") == "evaluate":
            self.trainer_jobs.append((job, result.status))
            if self.mangle and result.status == "ok":
                result.result["payload"]["outcomes"] = result.result["payload"]["outcomes"][:-1]
        return result

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(scope="module")
def evaluator(metarl_cache):
    with Evaluator(CascadeSettings(**BASE), workers=1, prewarm=False) as quiet:
        quiet.references("drift", [0])  # baselines first, alone: they set every limit
        quiet.references("optimizer", [0])
    with Evaluator(CascadeSettings(**BASE), workers=2) as the_evaluator:
        the_evaluator._executor = Watched(the_evaluator._executor, forged_breaker())
        yield the_evaluator


@pytest.fixture(scope="module")
def alone(evaluator):
    """Each honest candidate's outcome alone: a batch of one, its own trainer."""
    sources = {"drift": [PPO_CLIP, DRIFT.seed_program("lpo").source, WIDE]}
    sources["optimizer"] = [ADAM, OPTIMIZER.seed_program("sgd").source]
    sources["optimizer"].append(MOMENTUM)
    return {
        (task, source): evaluator.evaluate(source, task)
        for task, group in sources.items()
        for source in group
    }


def trainer_jobs_of(evaluator, run) -> tuple[list, object]:
    """(the trainer jobs `run()` started, its return value)."""
    jobs = evaluator._executor.trainer_jobs
    before = len(jobs)
    value = run()
    return jobs[before:], value


def scores(outcome) -> tuple:
    return (
        outcome.passed,
        outcome.stage,
        outcome.reason,
        [(s.env, s.stage, s.returns, s.curve) for s in outcome.env_scores],
        outcome.fitness,
    )


@pytest.mark.slow  # end to end: each honest candidate trained alone and in the batch (~80 s)
def test_a_batch_breaker_fails_alone_in_the_same_trainer_job_and_the_others_score_as_alone(
    evaluator, alone
):
    batch = [PPO_CLIP, BREAKER, DRIFT.seed_program("lpo").source, WIDE]
    jobs, outcomes = trainer_jobs_of(evaluator, lambda: evaluator.evaluate_batch(batch, "drift"))
    breaker = outcomes[1]
    assert not breaker.passed and not evaluator_fault(breaker), breaker.reason
    # caught at the training shapes, with the candidate's own reason: by the behavioural check
    # of its probes (tasks/behaviour.py), else by the pre-flight before the shared compile
    assert "Error refining shapes" in breaker.reason, breaker.reason
    if breaker.stage == "short":
        assert "its VJP (epsilon=0.2) on 128 elements" in breaker.reason, breaker.reason
    assert reward_of(breaker) == (getattr(REWARDS, breaker.stage), breaker.stage)
    assert breaker.stage in ("probes", "short")
    # found inside the batch's own trainer job: no extra job at all
    assert [status for _, status in jobs] == ["ok"] and len(jobs) - 1 <= MAX_EXTRA_JOBS
    for source, outcome in zip(batch, outcomes):
        if source is not BREAKER:
            assert scores(outcome) == scores(alone[("drift", source)])
            assert outcome.sandbox["batch"]["size"] == 4


@pytest.mark.slow  # end to end: waits out the hang's own limit (~65 s)
def test_a_training_only_hang_is_stopped_at_its_own_limit_once_and_the_others_score_as_alone(
    evaluator, alone
):
    honest = [ADAM, OPTIMIZER.seed_program("sgd").source] + [MOMENTUM]
    batch = [honest[0], HANG, honest[1], honest[2]]
    start = time.perf_counter()
    jobs, outcomes = trainer_jobs_of(
        evaluator, lambda: evaluator.evaluate_batch(batch, "optimizer")
    )
    elapsed = time.perf_counter() - start
    hang = outcomes[1]
    own = hang.sandbox["candidate_limit_s"]
    assert not hang.passed and hang.stage == "short" and not evaluator_fault(hang)
    assert f"more than its own limit of {own:g} s" in hang.reason, hang.reason
    assert reward_of(hang) == (REWARDS.short, "short")
    # stopped by its own clock in the batch's job; the three others trained once more
    statuses = [status for _, status in jobs]
    assert statuses == ["stopped", "ok"] and len(jobs) - 1 <= MAX_EXTRA_JOBS
    assert [len(job["artifacts"]) for job, _ in jobs] == [4, 3]
    assert sum(status in ("stopped", "timeout") for status in statuses) == 1  # one limit
    assert elapsed < 3 * own + 120, elapsed  # its limit, once, plus two jobs' honest work
    for source, outcome in zip(batch, outcomes):
        if source is not HANG:
            assert scores(outcome) == scores(alone[("optimizer", source)])
            assert outcome.sandbox["batch"]["size"] == 3


def test_a_malformed_result_from_the_trusted_trainer_is_an_evaluator_fault(evaluator):
    evaluator._executor.mangle = True
    try:
        outcomes = evaluator.evaluate_batch([PPO_CLIP, WIDE], "drift")
    finally:
        evaluator._executor.mangle = False
    for outcome in outcomes:
        assert outcome.fault == "evaluator" and evaluator_fault(outcome)
        assert outcome.reason.startswith("internal evaluator error: malformed result")
        assert reward_of(outcome) == (None, "excluded")


def test_the_pre_flight_finds_the_breaker_at_the_exact_shapes_the_trainer_calls_it_with():
    config = plan_runs(CascadeSettings(**BASE))[0].config
    sites = call_sites(DRIFT, config, [0], "cpu")
    assert [(s.vjp, s.inputs[0][0]) for s in sites] == [(False, (128,)), (True, (128,))]
    assert preflight(DRIFT, baseline_artifact(DRIFT, "cpu"), sites, "cpu") is None
    reason = preflight(DRIFT, forged_breaker(), sites, "cpu")
    assert reason.startswith("ValueError while compiling its VJP (epsilon=0.2) on 128 elements")
    with_two_seeds = call_sites(DRIFT, config, [0, 1], "cpu")
    assert [s.inputs[0][0] for s in with_two_seeds] == [(256,), (256,)]
