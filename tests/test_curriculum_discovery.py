"""Curriculum-driven discovery (discovery/curriculum.py): each generation's training envs are
drawn by the curriculum from the suite's distribution; validation and test stay fixed.

In-process with the role-aware fake evaluator (tests/role_evaluator.py): no sandbox, no
training, so the draws, the scores and the selections are exact and deterministic.
"""

from __future__ import annotations

import math

import pytest
from role_evaluator import RoleEvaluator

from metarl.archives import Archive
from metarl.discovery.config import ConfigError, DiscoverConfig
from metarl.discovery.curriculum import level_scores
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.rl.suites import get_suite


def config(**changes) -> DiscoverConfig:
    base = dict(
        suite="grid-small",
        timesteps=8192,
        seeds=1,
        seed_values=[0],
        max_time=None,
        islands=1,
        budget=8,
        children=2,
        confirm=True,
        confirm_seeds=2,
        race_seeds=4,
        heldout=False,
        rng_seed=5,
        curriculum="groove",
        curriculum_levels=2,
        curriculum_buffer=4,
    )
    return DiscoverConfig(**{**base, **changes})


def run(path, cfg, resume=None):
    log = []
    with Archive(path) as archive:
        loop = DiscoveryLoop(
            archive,
            cfg,
            MutationProposer(),
            resume=resume,
            evaluator_factory=lambda settings, workers: RoleEvaluator(settings, log),
        )
        result = loop.run()
        rows = archive.run_candidates(result.run_id)
        state = archive.get_run(result.run_id)["state"]
    return result, rows, state


def trained_envs(row: dict) -> list[str]:
    return [e["env"] for e in row["outcome"]["env_scores"] if e["role"] == "train"]


def test_each_generations_children_train_on_that_generations_draw(tmp_path):
    _, rows, state = run(tmp_path / "a.db", config())
    history = state["curriculum_history"]
    children = [r for r in rows if r["generation"]]
    assert [h["generation"] for h in history] == sorted({r["generation"] for r in children})
    assert all(len(set(h["levels"])) == len(h["levels"]) for h in history)  # distinct levels
    for row in children:
        (entry,) = [h for h in history if h["generation"] == row["generation"]]
        assert trained_envs(row) == entry["envs"]
        assert entry["envs"] == [f"Grid-small:level={s}" for s in entry["levels"]]
    suite = get_suite("grid-small")
    seeds = [r for r in rows if not r["generation"]]
    assert all(trained_envs(r) == list(suite.envs) for r in seeds)  # warm starts: fixed draws


def test_replayed_levels_come_from_the_buffer_and_new_ones_are_fresh(tmp_path):
    _, _, state = run(tmp_path / "a.db", config(budget=12))
    buffered: set[int] = set()
    seen: set[int] = set()
    for entry in state["curriculum_history"]:
        if entry["replay"]:
            assert set(entry["levels"]) <= buffered
        else:
            assert not set(entry["levels"]) & seen
        seen |= set(entry["levels"])
        buffered = {seed for seed, _, _ in entry["buffer"]}
        assert len(buffered) <= 4


def test_curriculum_discovery_with_a_fixed_rng_seed_is_reproducible(tmp_path):
    first = run(tmp_path / "a.db", config())
    second = run(tmp_path / "b.db", config())
    assert first[2]["curriculum_history"] == second[2]["curriculum_history"]
    assert [(r["code"], trained_envs(r)) for r in first[1]] == [
        (r["code"], trained_envs(r)) for r in second[1]
    ]
    other = run(tmp_path / "c.db", config(rng_seed=6))
    assert (
        other[2]["curriculum_history"][0]["levels"] != first[2]["curriculum_history"][0]["levels"]
    )


def test_a_resumed_curriculum_run_draws_what_an_unbroken_one_draws(tmp_path):
    whole = run(tmp_path / "a.db", config(budget=8))
    part = run(tmp_path / "b.db", config(budget=4))
    resumed = run(tmp_path / "b.db", config(budget=8), resume=part[0].run_id)
    assert resumed[2]["curriculum_history"] == whole[2]["curriculum_history"]
    assert resumed[2]["curriculum"] == whole[2]["curriculum"]


def score(env, normalised, pvl, role="train"):
    return EnvScore(
        env=env,
        seeds=[0],
        total_timesteps=1,
        returns=[1.0],
        mean=1.0,
        std=0.0,
        normalised=normalised,
        baseline_mean=1.0,
        random_mean=0.0,
        role=role,
        positive_value_loss=pvl,
    )


def test_level_scores_are_regret_against_the_baseline_or_positive_value_loss():
    a = Outcome(
        passed=True, stage="full", env_scores=[score("L1", 0.5, 0.2), score("L2", 1.5, 0.4)]
    )
    b = Outcome(passed=True, stage="full", env_scores=[score("L1", 0.7, 0.6)])
    failed = Outcome.failure("probes", "no")
    assert level_scores("groove", ["L1", "L2"], [a, b, failed]) == pytest.approx([0.4, -0.5])
    assert level_scores("plr", ["L1", "L2"], [a, b, failed]) == pytest.approx([0.4, 0.4])
    unscored = level_scores("groove", ["L3"], [a, b])
    assert math.isnan(unscored[0])


def test_a_curriculum_needs_a_distribution_suite():
    with pytest.raises(ConfigError, match="distribution suite"):
        config(suite="classic").resolved()
    with pytest.raises(ConfigError, match="--curriculum is one of"):
        config(curriculum="hardest").resolved()
    assert config(curriculum_levels=None).resolved().curriculum_levels == 4


def test_the_report_shows_a_discovery_runs_level_buffer(tmp_path):
    from metarl.report.settings import ReportSettings
    from metarl.report.story import run_story

    result, _, state = run(tmp_path / "a.db", config(budget=12))
    with Archive(tmp_path / "a.db") as archive:
        story = run_story(archive, result.run_id, ReportSettings())
    history = state["curriculum_history"]
    assert [g.generation for g in story.curriculum] == [h["generation"] for h in history]
    last = story.curriculum[-1]
    assert [b.name for b in last.buffer] == [
        f"Grid-small:level={s}" for s, _, _ in history[-1]["buffer"]
    ]
    assert [d.regret for d in last.drawn] == history[-1]["scores"]


# a real PLR curriculum (~390 s in .ci/run on 2 cores); PLR's scoring stays in CI (test_lpg_es)
@pytest.mark.long
def test_a_real_plr_curriculum_scores_levels_by_the_childrens_own_value_loss(
    tmp_path, metarl_cache
):
    """Sandboxed PPO on drawn grid levels: every drawn level gets the mean positive value loss
    of the children trained there, which the archive also holds per evaluation."""
    from conftest import metarl_cli

    path = tmp_path / "metarl.db"
    result = metarl_cli(
        "discover",
        "--suite",
        "grid-small",
        "--curriculum",
        "plr",
        "--curriculum-levels",
        "2",
        "--budget",
        "2",
        "--children",
        "2",
        "--timesteps",
        "4096",
        "--seeds",
        "1",
        "--seed-values",
        "0",
        "--no-heldout",
        "--archive",
        str(path),
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with Archive(path, must_exist=True) as archive:
        run = archive.get_run("r1")
        rows = archive.run_candidates("r1")
    (entry,) = run["state"]["curriculum_history"]
    children = [r for r in rows if r["generation"] == 1 and r["status"] == "passed"]
    assert children, "no child passed"
    for env, score in zip(entry["envs"], entry["scores"]):
        values = [
            e["positive_value_loss"]
            for r in children
            for e in r["outcome"]["env_scores"]
            if e["env"] == env and e["role"] == "train"
        ]
        assert score == pytest.approx(sum(values) / len(values))
        assert score >= 0.0
