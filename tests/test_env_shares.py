"""A lone candidate's envs train in groups on idle trainer slots and score as one job would."""

from __future__ import annotations

import pytest

from metarl.evaluation.cascade import CascadeSettings, Evaluator
from metarl.evaluation.env_shares import env_groups, group_settings, merge_outcomes
from metarl.evaluation.executors import ExecutorSettings
from metarl.evaluation.outcome import Outcome
from metarl.evaluation.settings import plan_runs
from metarl.tasks import get_task

CLASSIC = CascadeSettings(
    suite="classic",
    seeds=1,
    seed_values=[0],
    total_timesteps=4500,
    short_timesteps=4096,
    heldout=False,
    timeout_s=120,
    probe_seed=0,
)


def test_groups_are_the_plans_envs_in_order_the_short_run_first():
    plan = plan_runs(CascadeSettings(suite="discobench", seeds=1, seed_values=[0]))
    groups = env_groups(plan, 2)
    assert groups == [
        ["Breakout-MinAtar", "Freeway-MinAtar"],
        ["Asterix-MinAtar", "SpaceInvaders-MinAtar"],
    ]
    assert env_groups(plan, 3) == [
        ["Breakout-MinAtar", "Freeway-MinAtar"],
        ["Asterix-MinAtar"],
        ["SpaceInvaders-MinAtar"],
    ]
    assert env_groups(plan, 1) == [[e for g in groups for e in g]]
    settings = CascadeSettings(suite="discobench", seeds=1, seed_values=[0])
    first, second = group_settings(settings, groups)
    assert [e.stage for e in plan_runs(first)] == ["short", "full", "full"]
    assert [e.stage for e in plan_runs(second)] == ["full", "full"]
    assert plan_runs(first) + plan_runs(second) == plan


def test_a_plan_of_one_env_is_not_split():
    settings = CascadeSettings(suite="smoke", seeds=1, seed_values=[0])
    assert group_settings(settings, env_groups(plan_runs(settings), 4)) == []


def passed(scores: list[str], **timings) -> Outcome:
    return Outcome(passed=True, stage="full", env_scores=list(scores), timings=timings)


def test_the_merge_stops_where_one_job_walking_the_plan_would():
    first, second = passed(["breakout", "freeway"], run=2.0), passed(["asterix"], run=3.0)
    first.fingerprint, first.behaviour = "abc", [1.0]
    merged = merge_outcomes([first, second])
    assert merged.passed and merged.stage == "full" and merged.fault is None
    assert merged.env_scores == ["breakout", "freeway", "asterix"]
    assert merged.timings == {"run": 5.0} and merged.fingerprint == "abc"
    # the later group stops: the earlier group's scores, then its own, with its reason
    stopped = Outcome(passed=False, stage="full", reason="diverged", env_scores=["asterix"])
    merged = merge_outcomes([first, stopped])
    assert not merged.passed and merged.reason == "diverged" and merged.fault == "candidate"
    assert merged.env_scores == ["breakout", "freeway", "asterix"]
    # the first group stops (the short run): what the later ones trained is dropped
    short = Outcome(passed=False, stage="short", reason="below the threshold")
    merged = merge_outcomes([short, second])
    assert (merged.passed, merged.stage, merged.env_scores) == (False, "short", [])
    fault = Outcome.evaluator_fault("the trainer never started")
    assert merge_outcomes([first, fault]).fault == "evaluator"


@pytest.fixture(scope="module")
def grouped(metarl_cache):
    """An evaluator with two trainer slots: a lone candidate's two envs train at once."""
    with Evaluator(CLASSIC, workers=2, executor=ExecutorSettings(trainers=2)) as evaluator:
        yield evaluator


def test_a_lone_candidate_scores_in_env_groups_what_one_trainer_job_gives(grouped):
    """LPO alone on two trainer slots trains CartPole and Acrobot in two jobs at once; beside
    another program (a batch of two: one job each, walking the whole plan) it returns the
    same numbers, bit for bit."""
    lpo = get_task("drift").seed_program("lpo").source
    other = get_task("drift").seed_program("ppo_clip").source.replace("clipped_ratio", "kept")
    (alone,) = grouped.evaluate_batch([lpo], "drift")
    beside, _ = grouped.evaluate_batch([lpo, other], "drift")
    assert alone.passed and beside.passed, (alone.reason, beside.reason)
    assert alone.sandbox["env_groups"] == [["CartPole-v1"], ["Acrobot-v1"]]
    assert "env_groups" not in beside.sandbox
    assert [s.env for s in alone.env_scores] == ["CartPole-v1", "Acrobot-v1"]
    for grouped_score, walked in zip(alone.env_scores, beside.env_scores, strict=True):
        assert (grouped_score.env, grouped_score.stage) == (walked.env, walked.stage)
        assert grouped_score.seeds == walked.seeds and grouped_score.returns == walked.returns
        assert grouped_score.curve == walked.curve
    assert alone.fitness == beside.fitness and alone.fitness_ci == beside.fitness_ci
    assert alone.timings["run"] > 0 and alone.fingerprint == beside.fingerprint


def test_the_short_run_still_stops_a_lone_candidate_in_groups(grouped):
    """An optimizer that never learns stops at the short run with no later env scored: the
    first group holds the short run, and its stop decides, whatever the other group did."""
    frozen = (
        "def optimizer(grad, param, momentum, state, step, progress, lr):\n"
        "    return 0.0 * grad, state\n"
    )
    (outcome,) = grouped.evaluate_batch([frozen], "optimizer")
    assert not outcome.passed and outcome.stage == "short", outcome.reason
    assert outcome.reason.startswith("short run") and outcome.fault == "candidate"
    assert outcome.sandbox["env_groups"] == [["CartPole-v1"], ["Acrobot-v1"]]
    assert [s.env for s in outcome.env_scores] == ["CartPole-v1"]
