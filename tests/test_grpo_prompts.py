"""GRPO's prompts are the LLM proposer's own, built from an archive's discover run; held-out
prompts never leak into training or the warm start; the known programs close the copy hack;
the gym-style environment judges each attempt with the same reward."""

from __future__ import annotations

import json

import pytest

from metarl.archives.store import Archive, ArchiveError
from metarl.discovery.proposers.llm import prompts
from metarl.discovery.proposers.llm.extraction import extract
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.settings import CascadeSettings
from metarl.grpo import prompts as prompt_plan
from metarl.grpo.environment import DiscoveryEnv
from metarl.grpo.rewards import CascadeReward
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash

TASK = get_task("drift")


def test_prompts_come_from_the_latest_discover_run_in_the_proposers_words(seeded_archive):
    with Archive(seeded_archive) as archive:
        plan = prompt_plan.plan_prompts(archive, TASK, None, heldout=1, rng_seed=0)
        rows = prompt_plan.prompt_rows(archive, TASK, plan.train)
    assert plan.source_run == "r1"
    assert [spec.operator for spec in plan.train] == ["rewrite", "fresh"]
    assert len(plan.heldout) == 1
    system, user = rows[0]["prompt"]
    assert system == {"role": "system", "content": prompts.system_prompt(TASK)}
    parent = plan.train[0].parents[0]
    assert f"id {parent}" in user["content"] or parent in user["content"]
    assert json.loads(rows[0]["parent_ids"]) == [parent]


def test_held_out_parents_are_never_trained_on_nor_warm_start_targets(seeded_archive):
    with Archive(seeded_archive) as archive:
        plan = prompt_plan.plan_prompts(archive, TASK, None, heldout=1, rng_seed=0)
        held = plan.heldout[0].parents[0]
        pairs = prompt_plan.sft_rows(archive, TASK, plan)
        held_code = archive.candidate(held)["code"]
    assert all(held not in spec.parents for spec in plan.train)
    assert pairs
    for pair in pairs:
        target = extract(pair["completion"][0]["content"], "drift").code
        assert target != held_code


def test_warm_start_targets_are_valid_replies_that_do_not_copy_the_prompts_parent(
    seeded_archive,
):
    with Archive(seeded_archive) as archive:
        plan = prompt_plan.plan_prompts(archive, TASK, None, heldout=0, rng_seed=0)
        pairs = prompt_plan.sft_rows(archive, TASK, plan)
        parents = {
            prompt_plan.render(archive, TASK, spec)[1]["content"]: [
                archive.candidate(p)["code"] for p in spec.parents
            ]
            for spec in plan.train
        }
    # rewrites of each seed and the fresh prompt; the crossover of the only two programs has
    # no program left to answer with
    assert len(pairs) == len(plan.train) - 1
    for pair in pairs:
        found = extract(pair["completion"][0]["content"], "drift")
        assert found.method == "json"
        assert found.code not in parents[pair["prompt"][1]["content"]]


def test_without_a_discover_run_the_seed_programs_are_the_parents(tmp_path):
    with Archive(tmp_path / "empty.db") as archive:
        plan = prompt_plan.plan_prompts(archive, TASK, None, heldout=1, rng_seed=0)
        known = prompt_plan.known_programs(archive, TASK, plan)
        rows = prompt_plan.prompt_rows(archive, TASK, plan.train + plan.heldout)
    parents = {p for spec in plan.train + plan.heldout for p in spec.parents}
    assert parents == {f"seed:{s.name}" for s in TASK.seed_programs()}
    assert set(known.hashes) == {source_hash(s.source) for s in TASK.seed_programs()}
    assert all(row["parent_ids"] == "[]" for row in rows)  # seeds are not archive candidates


def test_the_source_run_must_be_the_tasks(seeded_archive):
    with Archive(seeded_archive) as archive:
        with pytest.raises(ArchiveError, match="not optimizer"):
            prompt_plan.plan_prompts(archive, get_task("optimizer"), "r1", 1, 0)


def test_known_programs_hold_the_sources_passing_programs_by_source_and_behaviour(
    seeded_archive,
):
    with Archive(seeded_archive) as archive:
        plan = prompt_plan.plan_prompts(archive, TASK, None, heldout=0, rng_seed=0)
        known = prompt_plan.known_programs(archive, TASK, plan)
        passing = archive.passing_candidates("r1")
    assert {row["hash"] for row in passing} <= set(known.hashes)
    assert set(known.fingerprints.values()) == {row["id"] for row in passing}


@pytest.fixture
def environment(seeded_archive, metarl_cache):
    settings = CascadeSettings(
        suite="smoke", seeds=1, seed_values=[0], total_timesteps=8192, probe_seed=0
    )
    with Archive(seeded_archive) as archive, Evaluator(settings) as evaluator:
        plan = prompt_plan.plan_prompts(archive, TASK, None, heldout=0, rng_seed=0)
        reward = CascadeReward(
            evaluator, TASK, prompt_plan.known_programs(archive, TASK, plan), group=1
        )
        rows = prompt_plan.prompt_rows(archive, TASK, plan.train)
        yield DiscoveryEnv(reward, rows, attempts=2, rng_seed=0)


def test_the_environment_runs_a_trial_of_attempts_with_the_evaluators_feedback(environment):
    observation = environment.reset()
    assert [m["role"] for m in observation] == ["system", "user"]
    copy = json.dumps({"name": "copy", "code": TASK.seed_program("ppo_clip").source})
    first = environment.step(copy)
    assert (first.reward, first.label, first.done) == (-0.5, "duplicate", False)
    assert first.observation[-2] == {"role": "assistant", "content": copy}
    assert "same program" in first.observation[-1]["content"]
    assert "Propose the next program" in first.observation[-1]["content"]
    second = environment.step("")
    assert (second.reward, second.label, second.done) == (-1.0, "no-program", True)
    with pytest.raises(RuntimeError, match="reset"):
        environment.step(copy)
    assert len(environment.reset()) == 2  # a new trial starts from the prompt again
