"""Whose fault a failed trainer job is (evaluation/batch_training.py), decided in the parent,
checked against a scripted trainer: no JAX training, a fake clock (one last test runs a real
sandboxed worker, for the ticks the candidates' clocks run on). Each scripted job
plays the trainer's events (`active`, `stage`, the sandbox's ticks) for its artifacts, which are
plain names saying what the candidate does: "good", "hang" (its programs never return), "die"
(the trainer dies while they run), "poison" (the shared compile dies, with nobody active,
unless every candidate is compiled alone; then it dies in its own compile).

The bound checked everywhere: a culprit fails alone, with its own reason, in at most
ceil(log2 N) + 1 extra trainer jobs, and the other candidates get their own verdicts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import pytest

from metarl.evaluation.batch_training import BatchTraining
from metarl.evaluation.outcome import Outcome, evaluator_fault
from metarl.evaluation.sandbox import WorkerResult, run_job
from metarl.evaluation.seeds import TrainingSeeds
from metarl.evaluation.settings import CascadeSettings, Reference, SandboxLimits, plan_runs
from metarl.tasks import get_task

DRIFT = get_task("drift")

SETTINGS = CascadeSettings(
    suite="smoke",
    seeds=1,
    seed_values=[0],
    total_timesteps=4096,
    train_timeout_floor_s=10.0,
    train_timeout_factor=1.0,
)
REFERENCES = {
    entry.key: Reference(baseline_mean=100.0, random_mean=20.0, seconds=2.0, run={})
    for entry in plan_runs(SETTINGS)
}
OWN_LIMIT = 10.0  # max(floor 10, factor 1 x 2 s of baseline work)


@dataclass
class Candidate:
    """What the parent holds of a traced candidate (cascade._Pending's fields used here)."""

    artifact: str
    index: int = 0
    train_probe_seed: int = 0
    seeds: TrainingSeeds = TrainingSeeds((0,))
    outcome: Outcome | None = None
    sandbox: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)


class ScriptedTrainer:
    """Plays a trainer job for named artifacts on a fake clock; records every job."""

    def __init__(self, control_works: bool = True):
        self.now = 0.0
        self.jobs: list[dict] = []
        self.limits: list[float] = []
        self.control_works = control_works

    def clock(self) -> float:
        return self.now

    def __call__(self, job: dict, limit: float, on_event) -> WorkerResult:
        self.jobs.append(job)
        self.limits.append(limit)
        names = job["artifacts"]
        if job.get("control"):  # the control job: the baseline program, no candidate
            return self.result(1) if self.control_works else self.died("probes")
        for index in range(len(names)):  # probes and pre-flight, each on its own clock
            for event in (
                {"event": "active", "index": index, "stage": "probes"},
                {"event": "active", "index": None},
            ):
                self.now += 1.0
                assert not on_event(event)
        if "poison" in names and not job["isolate"]:
            self.now += 5.0
            return self.died("short")  # the shared compile died: nobody active
        for index, name in enumerate(names):
            on_event({"event": "active", "index": index, "stage": "short"})
            on_event({"event": "stage", "index": index, "stage": "short"})
            if name == "poison" or name == "die":
                return self.died("short")
            if name == "hang":
                started = self.now
                while not on_event({"event": "tick"}):
                    self.now += 0.1
                    assert self.now < 1000, "the clock never stopped the hang"
                self.hung_for = self.now - started
                return WorkerResult(status="stopped", stage="short")
            self.now += 2.0
            on_event({"event": "active", "index": None})
        return self.result(len(names))

    def died(self, stage: str) -> WorkerResult:
        return WorkerResult(
            status="died",
            stage=stage,
            reason=f"the evaluator process died (SIGSEGV) in stage {stage} without a result",
        )

    def result(self, size: int) -> WorkerResult:
        outcomes = [
            Outcome.failure("short", f"trained candidate {i}").to_dict() for i in range(size)
        ]
        return WorkerResult(
            status="ok", result={"kind": "evaluate", "payload": {"outcomes": outcomes}}
        )


def train(names: list[str], trainer: ScriptedTrainer) -> list[Candidate]:
    batch = [Candidate(name, index) for index, name in enumerate(names)]
    training = BatchTraining(SETTINGS, "cpu", trainer, lambda seeds: SETTINGS, trainer.clock)
    training.train(DRIFT, batch, REFERENCES, {}, lambda candidate, stage: None)
    return batch


def extra_jobs_bound(size: int) -> int:
    return math.ceil(math.log2(size)) + 1


def test_a_candidate_past_its_own_limit_is_stopped_blamed_and_the_rest_trained_once_more():
    trainer = ScriptedTrainer()
    good0, hang, good2, good3 = train(["good", "hang", "good", "good"], trainer)
    assert hang.outcome.stage == "short" and not evaluator_fault(hang.outcome)
    assert "more than its own limit of 10 s" in hang.outcome.reason
    assert [job["artifacts"] for job in trainer.jobs] == [
        ["good", "hang", "good", "good"],
        ["good", "good", "good"],
    ]
    assert [c.outcome.reason for c in (good0, good2, good3)] == [
        "trained candidate 0",
        "trained candidate 1",
        "trained candidate 2",
    ]
    # stopped once its own clock (1 s of probes, then training) passed its 10 s, long before
    # the job's own limit (one candidate limit each, plus one for the shared work)
    assert trainer.hung_for == pytest.approx(OWN_LIMIT - 1.0, abs=0.15)
    assert trainer.limits[0] == pytest.approx((4 + 1) * OWN_LIMIT)


def test_a_trainer_that_dies_in_a_candidate_is_blamed_on_it_only_once_it_fails_alone():
    trainer = ScriptedTrainer()
    good0, die, good2 = train(["good", "die", "good"], trainer)
    assert [job["artifacts"] for job in trainer.jobs] == [
        ["good", "die", "good"],
        ["die"],
        ["good", "good"],
    ]
    assert die.outcome.stage == "short" and "died (SIGSEGV)" in die.outcome.reason
    assert not evaluator_fault(die.outcome) and die.sandbox["batch"] == {"size": 1, "position": 0}
    assert good0.outcome.reason == "trained candidate 0"
    assert len(trainer.jobs) - 1 <= extra_jobs_bound(3)


def test_a_death_with_nobody_active_is_retried_with_every_program_compiled_alone():
    trainer = ScriptedTrainer()
    batch = train(["good", "good", "poison", "good"], trainer)
    assert [job["isolate"] for job in trainer.jobs] == [False, True, True]
    assert trainer.jobs[2]["artifacts"] == ["good", "good", "good"]
    poison = batch[2]
    assert poison.outcome.stage == "short" and "died" in poison.outcome.reason
    assert not evaluator_fault(poison.outcome)
    assert all(c.outcome.reason.startswith("trained") for c in batch if c is not poison)
    assert len(trainer.jobs) - 1 <= extra_jobs_bound(4)


@pytest.mark.parametrize("control_works", [True, False])
def test_a_lone_death_outside_its_programs_is_its_fault_only_if_the_trainer_works_without_it(
    control_works,
):
    trainer = ScriptedTrainer(control_works)
    (alone,) = train(["poison"], trainer)  # the shared compile dies, nobody active
    assert (
        len(trainer.jobs) == 2 and trainer.jobs[1]["control"] and not trainer.jobs[1]["artifacts"]
    )
    assert evaluator_fault(alone.outcome) is not control_works
    if control_works:
        assert "the trainer works without it" in alone.outcome.reason


def test_a_trainer_that_never_started_or_sent_a_malformed_result_is_an_evaluator_fault():
    class Broken(ScriptedTrainer):
        def __init__(self, result):
            super().__init__()
            self.fixed = result

        def __call__(self, job, limit, on_event):
            self.jobs.append(job)
            return self.fixed

    never = WorkerResult(status="startup", reason="the sandbox worker failed to start")
    malformed = WorkerResult(status="ok", result={"kind": "evaluate", "payload": {"outcomes": []}})
    for result in (never, malformed):
        trainer = Broken(result)
        batch = train(["good", "good"], trainer)
        assert len(trainer.jobs) == 1
        assert all(evaluator_fault(c.outcome) for c in batch)
        assert all(c.outcome.fault == "evaluator" for c in batch)


def test_a_silent_worker_gets_ticks_and_a_tick_can_stop_it():
    """WorkerProcess.run calls `on_event` with a tick every 0.1 s while no message comes: how
    the parent's candidate clocks run while a trainer computes without a word."""
    seen = []

    def on_event(message: dict) -> bool:
        seen.append(message)
        return len(seen) >= 3

    source = "def drift(ratio, advantage, epsilon):\n    while True:\n        pass\n"
    job = {"kind": "trace", "task": "drift", "source": source, "probe_seed": 0, "platform": "cpu"}
    start = time.perf_counter()
    result = run_job(job, SandboxLimits(timeout_s=60), on_event, role="tracer")
    assert result.status == "stopped" and time.perf_counter() - start < 40
    assert seen == [{"event": "tick"}] * 3 and {"event": "tick"} not in result.events
