"""The GRPO reward: each stage's value on hand-written completions, scored by the real sandboxed
cascade (smoke suite, tiny budget), duplicates and empty output closed as reward hacks, repeats
cached, evaluator faults excluded rather than scored."""

from __future__ import annotations

import json

import pytest
from tiny_proposer import variant_source

from metarl.archives.store import Archive
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.outcome import Outcome, evaluator_fault
from metarl.evaluation.settings import CascadeSettings
from metarl.grpo import prompts as prompt_plan
from metarl.grpo.rewards import (
    REWARDS,
    CascadeReward,
    KnownPrograms,
    completion_text,
    passed_stages,
    reward_of,
    zero_spread_groups,
)
from metarl.tasks import get_task

TASK = get_task("drift")
TINY = CascadeSettings(suite="smoke", seeds=1, seed_values=[0], total_timesteps=8192, probe_seed=0)
PPO = TASK.seed_program("ppo_clip").source


def reply(code: str, name: str = "x") -> str:
    return json.dumps({"thought": "t", "name": name, "code": code})


# -- the value of each verdict (pure) ---------------------------------------------------------


def test_each_stage_has_its_documented_reward_and_later_stages_earn_more():
    order = [
        reward_of(Outcome.failure("propose", "no program"))[0],
        reward_of(Outcome.failure("static", "import os"))[0],
        reward_of(Outcome.failure("probes", "negative"))[0],
        reward_of(Outcome.failure("short", "too slow to learn"))[0],
        reward_of(Outcome(passed=True, stage="full", fitness=0.0))[0],
    ]
    assert order == [-1.0, -0.75, -0.5, -0.25, 0.0]
    assert order == sorted(order)
    assert reward_of(Outcome.failure("full", "nan in update 3"))[0] == REWARDS.full


def test_a_scored_program_earns_its_fitness_clipped_to_the_documented_range():
    assert reward_of(Outcome(passed=True, stage="full", fitness=1.25)) == (1.25, "scored")
    assert reward_of(Outcome(passed=True, stage="full", fitness=-0.4))[0] == 0.0
    assert reward_of(Outcome(passed=True, stage="full", fitness=40.0))[0] == REWARDS.fitness_cap


def test_duplicates_earn_the_duplicate_reward_whatever_the_copy_would_score():
    copy = Outcome.failure("dedup", "the same program as r1-0", duplicate_of="r1-0")
    twin = Outcome.failure("probes", "behaves identically to r1-0", duplicate_of="r1-0")
    assert reward_of(copy) == (REWARDS.duplicate, "duplicate")
    assert reward_of(twin) == (REWARDS.duplicate, "duplicate")
    assert passed_stages(twin) == ("parse", "static", "probes")


def test_evaluator_faults_are_excluded_not_scored():
    broken = Outcome.evaluator_fault("malformed result")
    candidate_fault = Outcome.failure("probes", "drift is negative", sandbox={"status": "ok"})
    assert broken.fault == "evaluator" and broken.reason.startswith("internal evaluator error")
    assert evaluator_fault(broken) and not evaluator_fault(candidate_fault)
    assert reward_of(broken) == (None, "excluded")
    assert reward_of(candidate_fault) == (REWARDS.probes, "probes")


def test_archived_outcomes_from_before_the_fault_field_keep_their_fault():
    legacy = Outcome.failure("probes", "internal evaluator error: malformed result").to_dict()
    never_started = Outcome.failure("probes", "worker died", sandbox={"status": "startup"})
    for data in (legacy, never_started.to_dict()):
        del data["fault"]
        assert evaluator_fault(Outcome.from_dict(data))
    plain = Outcome.failure("short", "too slow to learn").to_dict()
    del plain["fault"]
    assert not evaluator_fault(Outcome.from_dict(plain))


def test_breaking_the_trainer_earns_the_failure_reward_of_its_stage_not_a_skip():
    hung = Outcome.failure("short", "timed out in stage short: its programs ran 21 s, more than")
    broke = Outcome.failure("short", "ValueError while compiling its VJP (epsilon=0.2) on 128")
    died = Outcome.failure("probes", "the evaluator process died (SIGSEGV) in stage probes")
    assert reward_of(hung) == reward_of(broke) == (REWARDS.short, "short")
    assert reward_of(died) == (REWARDS.probes, "probes")


def test_groups_whose_scorable_rewards_are_equal_count_as_zero_spread():
    rewards = [-1.0, -1.0, -1.0, -1.0, -1.0, 0.5, None, -1.0, None, None, None, 0.2]
    assert zero_spread_groups(rewards, 4) == (3, 2)  # the third has one scorable reward


def test_completion_text_reads_trl_conversational_and_plain_completions():
    assert completion_text([{"role": "assistant", "content": "abc"}]) == "abc"
    assert completion_text("plain") == "plain"
    assert completion_text(None) == ""


# -- the real cascade --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evaluator(metarl_cache):
    with Evaluator(TINY) as evaluator:
        yield evaluator


@pytest.fixture
def known(seeded_archive):
    with Archive(seeded_archive) as archive:
        plan = prompt_plan.plan_prompts(archive, TASK, None, 0, 0)
        return prompt_plan.known_programs(archive, TASK, plan)


def test_every_stage_on_hand_written_completions_in_one_batched_evaluation(evaluator, known):
    recorded = []
    reward = CascadeReward(
        evaluator, TASK, known, group=4, record=lambda v, c, s, p: recorded.append(v)
    )
    renamed_ppo = PPO.replace("clipped_ratio", "kept_ratio")  # same behaviour, new source
    replies = [
        "",  # nothing
        "I would make the clip adaptive.",  # prose, no program
        reply("import os\n\ndef drift(ratio, advantage, epsilon):\n    return ratio * 0.0\n"),
        reply("def drift(ratio, advantage, epsilon):\n    return (ratio - 1.0) * advantage\n"),
        reply(PPO),  # the verbatim seed: scores 1.000 through the cascade
        reply(renamed_ppo),
        reply(variant_source(), "wide_clip"),
        f"Here it is:\n```python\n{variant_source()}```",  # the same program, fenced
    ]
    stats = reward.score(replies, {"prompt_id": ["p"] * len(replies)}, step=3)
    assert stats.labels == [
        "no-program",
        "no-program",
        "static",
        "probes",
        "duplicate",
        "duplicate",
        "scored",
        "scored",
    ]
    assert stats.rewards[:6] == [-1.0, -1.0, -0.75, -0.5, -0.5, -0.5]
    verdicts = recorded[0]
    assert verdicts[4].outcome.stage == "dedup"  # a copy never reaches the cascade
    assert verdicts[5].outcome.duplicate_of is not None  # caught by its behaviour
    fitness = verdicts[6].outcome.fitness
    assert fitness is not None and stats.rewards[6] == pytest.approx(min(max(fitness, 0.0), 3.0))
    assert stats.rewards[7] == stats.rewards[6]
    assert verdicts[7].same_as is verdicts[6]  # archived as reusing the first one's scores
    # the four new programs went to the cascade once, together (the fenced copy rode along)
    assert stats.evaluated == 4
    assert stats.passed == {"parse": 6, "static": 4, "probes": 3, "short": 2, "full": 2}
    assert stats.duplicates == 2 and stats.excluded == 0
    assert (stats.groups, stats.zero_spread) == (2, 0)


def test_a_program_the_run_already_scored_reuses_its_verdict(evaluator, known):
    reward = CascadeReward(evaluator, TASK, known, group=2)
    first = reward.score([reply(variant_source())])
    reward.last_verdicts[0].candidate_id = "r9-1"  # as the archive recorder would set it
    again = reward.score([reply(variant_source()), ""])
    assert again.evaluated == 0
    assert again.rewards[0] == first.rewards[0]
    assert reward.last_verdicts[0].cached_from == "r9-1"


def test_trl_calls_it_with_conversational_completions_and_gets_one_reward_each(evaluator):
    reward = CascadeReward(evaluator, TASK, KnownPrograms(), group=2)
    metrics = {}
    rewards = reward(
        prompts=[[{"role": "user", "content": "p"}]] * 2,
        completions=[
            [{"role": "assistant", "content": ""}],
            [{"role": "assistant", "content": reply(PPO)}],
        ],
        completion_ids=[[1, 2], [3, 4, 5]],
        trainer_state=None,
        log_metric=lambda name, value: metrics.__setitem__(name, value),
        prompt_id=["a", "a"],
        log_extra=print,  # trl passes callables beside the columns
    )
    # PPO-clip is not known here, so it is scored; nothing earns the least
    assert rewards[0] == -1.0 and rewards[1] >= 0.0
    assert metrics["pass/parse"] == 0.5 and metrics["zero_spread"] == 0.0
    assert reward.history[-1].completion_tokens == 5


def test_an_evaluator_that_cannot_start_a_worker_excludes_the_batch(known, metarl_cache):
    # 64 MB of address space cannot even import jax: the worker never becomes ready
    starved = CascadeSettings(
        suite="smoke", seeds=1, seed_values=[0], total_timesteps=8192, memory_mb=64
    )
    with Evaluator(starved, prewarm=False) as evaluator:
        reward = CascadeReward(evaluator, TASK, known, group=3)
        stats = reward.score([reply(variant_source()), "", reply(PPO)])
    assert stats.rewards == [None, -1.0, -0.5]
    assert stats.labels[0] == "excluded" and stats.excluded == 1
    assert stats.zero_spread == 0  # two scorable rewards that differ
    assert reward.cache == {}  # a fault is not remembered: the program is scored next time
