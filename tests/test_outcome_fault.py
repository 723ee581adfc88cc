"""A passing outcome has no fault: `Outcome.fault` is None when it passed, in memory, in the
JSON `metarl evaluate --json` prints, in a worker's message and in the archive; a failure is
the candidate's unless the evaluator says it is its own."""

from __future__ import annotations

import json

from metarl.archives.columns import outcome_columns
from metarl.evaluation.outcome import Outcome, evaluator_fault, parse_outcome


def test_a_passing_outcome_has_no_fault():
    outcome = Outcome(passed=True, stage="full", fitness=1.2)
    assert outcome.fault is None
    assert json.loads(json.dumps(outcome.to_dict()))["fault"] is None
    assert outcome_columns(outcome)["outcome"]["fault"] is None  # the archived outcome


def test_an_outcome_marked_passed_after_it_was_made_has_no_fault_either():
    outcome = Outcome(passed=False, stage="probes")  # as the cascade starts one (stages.py)
    assert outcome.fault == "candidate"
    outcome.passed, outcome.stage = True, "full"
    assert outcome.to_dict()["fault"] is None


def test_failures_are_the_candidates_unless_the_evaluator_failed():
    assert Outcome.failure("probes", "drift is negative").fault == "candidate"
    assert Outcome(passed=False, stage="short").fault == "candidate"
    broken = Outcome.evaluator_fault("malformed result")
    assert broken.fault == "evaluator" and evaluator_fault(broken)


def test_archived_and_worker_outcomes_read_back_with_no_fault_when_they_passed():
    older = {**Outcome(passed=True, stage="full").to_dict(), "fault": "candidate"}
    assert Outcome.from_dict(older).fault is None  # an archive written before this rule
    legacy = Outcome(passed=True, stage="full").to_dict()
    del legacy["fault"]  # from before `fault` was recorded
    assert Outcome.from_dict(legacy).fault is None
    message = Outcome(passed=True, stage="full", fitness=1.0).to_dict()  # a trainer's
    assert parse_outcome(message).fault is None
    assert parse_outcome(Outcome.failure("short", "too slow").to_dict()).fault == "candidate"
