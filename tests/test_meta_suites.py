"""Meta-RL suites (`<family>@<method>`) and the `--meta` flag: each role is one meta-training run
named like an environment, a wrong combination is one line and writes nothing, and a real
candidate is scored through the sandboxed cascade by its adaptation."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from conftest import invoke, metarl_cli

from metarl.evaluation.settings import CascadeSettings
from metarl.evaluation.stages import plan_runs, train_baselines
from metarl.rl.configs import META_CONFIGS, default_config
from metarl.rl.meta.names import MetaEnv, UnknownMetaEnv, parse_meta
from metarl.rl.meta.tasks import FAMILIES
from metarl.rl.suites import (
    TASK_FAMILIES,
    UnknownSuite,
    get_suite,
    meta_suite_name,
)
from metarl.tasks import get_task, meta_task_problem

DRIFT_SEED = "metarl/tasks/drift/seed_programs/ppo_clip.py"


def test_every_task_family_has_an_rl2_and_a_maml_suite_whose_roles_are_meta_runs():
    for family in TASK_FAMILIES:
        for method in ("rl2", "maml"):
            suite = get_suite(f"{family}@{method}")
            assert suite.roles() == {
                role: [MetaEnv(method, family, role).name]
                for role in ("train", "validation", "test")
            }
            assert suite.total_timesteps == META_CONFIGS[(method, family)]["total_timesteps"]
            assert 0 < suite.short_budget < suite.total_timesteps


def test_a_meta_env_name_round_trips_and_a_malformed_one_is_refused():
    meta = MetaEnv("maml", "point-tasks", "validation")
    assert parse_meta(meta.name) == meta
    for bad in ("Meta-rl2/bandit-tasks", "Meta-ppo/bandit-tasks/test", "Meta-rl2/x/holdout"):
        with pytest.raises(UnknownMetaEnv):
            parse_meta(bad)


def test_a_meta_config_counts_the_env_steps_one_update_really_takes():
    # RL²: one trial per env per update; MAML: (K+1) x episodes x horizon per task
    assert default_config("Meta-rl2/bandit-tasks/train").num_steps == 10
    assert default_config("Meta-rl2/point-tasks/test").num_steps == 60
    assert default_config("Meta-maml/point-tasks/test").num_steps == 2 * 10 * 20
    # the role does not change the config (the same meta-training, other held-out tasks)
    assert default_config("Meta-rl2/point-tasks/train").replace(env_name="x") == default_config(
        "Meta-rl2/point-tasks/test"
    ).replace(env_name="x")


def test_meta_resolves_a_family_to_its_suite_and_refuses_anything_else():
    assert meta_suite_name("pendulum-tasks", "maml") == "pendulum-tasks@maml"
    assert meta_suite_name("pendulum-tasks@rl2", "maml") == "pendulum-tasks@maml"
    assert meta_suite_name("classic", None) == "classic"
    with pytest.raises(UnknownSuite, match="task family suite"):
        meta_suite_name("classic", "rl2")
    with pytest.raises(UnknownSuite, match="unknown --meta"):
        meta_suite_name("bandit-tasks", "pearl")
    with pytest.raises(UnknownSuite, match="is a task family: add --meta"):
        get_suite("bandit-tasks")


def test_a_drift_cannot_be_maml_inner_rule_but_can_be_rl2_outer_objective():
    assert "use --task optimizer" in meta_task_problem("drift", "point-tasks@maml")
    assert meta_task_problem("drift", "point-tasks@rl2") is None
    assert meta_task_problem("optimizer", "point-tasks@maml") is None
    assert meta_task_problem("lpg", "bandit-tasks@rl2") is not None
    assert meta_task_problem("drift", "classic") is None


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("discover", "--task", "drift", "--suite", "bandit-tasks", "--meta", "maml"),
            "metarl discover: error: --meta maml trains only make_optimizer",
        ),
        (
            ("discover", "--suite", "bandit-tasks"),
            "metarl discover: error: bandit-tasks is a task family",
        ),
        (
            ("es", "--suite", "classic", "--meta", "rl2"),
            "metarl es: error: --meta needs a task family suite",
        ),
        (
            ("es", "--suite", "point-tasks", "--meta", "maml"),
            "metarl es: error: --meta maml trains only make_optimizer",
        ),
    ],
)
def test_a_wrong_meta_combination_is_one_line_and_creates_no_archive(
    tmp_path, restore_logging, args, message
):
    archive = tmp_path / "metarl.db"
    result = invoke(*args, "--archive", str(archive))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message)
    assert not archive.exists()


def test_evaluate_with_meta_and_a_drift_on_maml_is_one_line(restore_logging):
    result = invoke(
        "evaluate", DRIFT_SEED, "-t", "drift", "--suite", "bandit-tasks", "--meta", "maml"
    )
    assert result.exit_code == 2
    assert result.output.strip().startswith("metarl evaluate: error: --meta maml trains only")


@pytest.mark.long  # RL2 adaptation in the sandbox (~190 s in .ci/run on 2 cores)
def test_a_drift_is_scored_by_rl2_adaptation_in_the_sandbox_with_its_curves():
    process = metarl_cli(
        "evaluate",
        DRIFT_SEED,
        "--task",
        "drift",
        "--suite",
        "bandit-tasks",
        "--meta",
        "rl2",
        "--seeds",
        "2",
        "--timesteps",
        "20000",
        "--short-timesteps",
        "6400",
        "--json",
    )
    assert process.returncode == 0, process.stderr[-2000:]
    outcome = json.loads(process.stdout)
    assert outcome["stage"] == "full" and outcome["reason"] is None
    scores = {(s["env"], s["stage"]) for s in outcome["env_scores"]}
    full = {s["env"]: s for s in outcome["env_scores"] if s["stage"] == "full"}
    assert ("Meta-rl2/bandit-tasks/train", "short") in scores
    for role in ("train", "validation", "test"):
        score = full[f"Meta-rl2/bandit-tasks/{role}"]
        assert score["role"] == role
        # one point per pull of a ten-pull trial, and the paired from-scratch reference
        assert len(score["adaptation"]) == 10 and len(score["scratch"]) == 10
        # the score is the curve's mean, and the seed program is the baseline: exactly 1
        assert score["mean"] == pytest.approx(sum(score["adaptation"]) / 10, abs=1e-6)
        assert score["normalised"] == pytest.approx(1.0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_task_family_steps_inside_an_ahead_of_time_compiled_program(family):
    # BatchProgram calls programs compiled ahead of time; a module-level jax.Array that the
    # environment closes over becomes an extra program input such a call does not pass
    # ("compiled for 27 inputs but called with 23"): families keep their constants numpy
    tasks = FAMILIES[family]

    def steps(key):
        task = tasks.sample_task(key)
        obs, state = tasks.env.reset_env(key, task)
        for action in range(tasks.num_actions):
            obs, state, reward, _, _ = tasks.env.step_env(key, state, action, task)
        return obs, reward

    key = jax.random.PRNGKey(0)
    compiled = jax.jit(steps).lower(key).compile()
    np.testing.assert_array_equal(compiled(key)[0], jax.jit(steps)(key)[0])


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["point-tasks@maml", "pendulum-tasks@rl2"])
def test_the_baseline_of_a_meta_suite_trains_in_the_cascades_batch_program(suite):
    settings = CascadeSettings(suite=suite, seeds=1, seed_values=(3,), total_timesteps=2000)
    task = get_task("optimizer")
    plan = plan_runs(settings)
    baseline = train_baselines(task, settings, [entry.key for entry in plan], "cpu")
    assert {run["env"] for run in baseline.runs} == {entry.config.env_name for entry in plan}
    assert get_suite(suite).envs[0] in {run["env"] for run in baseline.runs}
    for run in baseline.runs:
        assert run["adaptation"] and run["scratch"] and run["nonfinite_update"] is None
