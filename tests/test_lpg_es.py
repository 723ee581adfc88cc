"""LPG meta-trained by ES (blackbox/lpg_es.py): antithetic task sampling, the curriculum in the
loop, the run's options, and an archived, scored, resumable run (slow)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from metarl.archives import Archive
from metarl.blackbox.config import ESConfig, ESConfigError
from metarl.blackbox.es import FAILED_FITNESS
from metarl.blackbox.lpg_es import LPGFitness, LPGRun, antithetic_tasks, pair_centred
from metarl.evaluation.lpg_evaluation import LPGEvaluator, env_lifetime
from metarl.evaluation.seeds import SeedSource
from metarl.rl.environments.levels import level_from_name
from metarl.rl.lpg.agent import lifetime_from_seed
from metarl.rl.lpg.network import LPGShape, init_lpg, read_lpg_source
from metarl.rl.suites import get_suite


def test_both_members_of_an_antithetic_pair_train_on_one_task():
    """evosax's pairs are (i, i + population/2)."""
    assert antithetic_tasks(6).tolist() == [0, 1, 2, 0, 1, 2]


def test_fitness_is_each_members_return_minus_its_pairs_mean():
    returns = np.array([10.0, 1.0, 4.0, 2.0])  # pairs (10, 4) and (1, 2)
    assert pair_centred(returns).tolist() == [3.0, -0.5, -3.0, 0.5]


def test_a_non_finite_member_ranks_last_and_its_partner_learns_nothing():
    returns = np.array([np.nan, 1.0, 4.0, 2.0])
    assert pair_centred(returns).tolist() == [FAILED_FITNESS, -0.5, 0.0, 0.5]


def test_lpg_runs_take_groove_es_settings_and_grid_suites_only():
    config = ESConfig(task="lpg", suite="grid-small").resolved()
    assert (config.sigma, config.lr, config.sigma_decay, config.hidden) == (0.1, 0.01, 1.0, 32)
    drift = ESConfig().resolved()
    assert (drift.sigma, drift.lr) == (0.03, 0.03)
    with pytest.raises(ESConfigError, match="grid levels"):
        ESConfig(task="lpg", suite="classic").resolved()
    with pytest.raises(ESConfigError, match="--curriculum"):
        ESConfig(task="lpg", suite="grid-small", curriculum="hardest").resolved()


def test_lpg_options_do_not_change_other_runs_hashes():
    """A drift run's search is defined as before the LPG options existed (its resume matches)."""
    assert ESConfig(curriculum="groove").resolved().hash() == ESConfig().resolved().hash()
    lpg = ESConfig(task="lpg", suite="grid-small")
    assert (
        lpg.resolved().hash() != ESConfig(**{**lpg.__dict__, "curriculum": "plr"}).resolved().hash()
    )


def test_a_drawn_levels_task_is_the_named_level_with_the_lifetime_its_seed_fixes():
    config = ESConfig(task="lpg", suite="grid-small", population=4, env_workers=2).resolved()
    fitness = LPGFitness(config, LPGShape(gru_width=8), None)
    levels, lifetimes = fitness.tasks([17, 5])
    named = level_from_name("Grid-small:level=17")
    first = jax.tree.map(lambda x: x[0], levels)
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(named)):
        np.testing.assert_array_equal(a, b)
    assert lifetimes.tolist() == [
        lifetime_from_seed(17, (10, 250)),
        lifetime_from_seed(5, (10, 250)),
    ]
    suite = get_suite("grid-small")
    assert env_lifetime(suite, "Grid-small:level=17", None) == lifetimes[0]
    assert env_lifetime(suite, "Grid-dense", None) == 250
    assert env_lifetime(suite, "Grid-dense", 2500) == 2500
    classic = get_suite("classic")  # no distribution: the per-env budget in updates
    assert env_lifetime(classic, "CartPole-v1", None) == classic.total_timesteps // 320


def test_the_lpg_evaluator_refuses_a_program_without_training_it():
    evaluator = LPGEvaluator(get_suite("grid-small"), SeedSource(1, pinned=[0]))
    outcome = evaluator.evaluate("import os\nos.system('true')")
    assert not outcome.passed and outcome.stage == "static"
    assert "not an LPG network" in outcome.reason
    assert evaluator.jobs == 0  # no worker was started for it


@pytest.fixture
def tiny_grid(monkeypatch):
    """grid-small with lifetimes of 5..10 updates and one draw per role: seconds per run."""
    from metarl.rl.environments.distributions import EnvDistribution
    from metarl.rl.suites import SUITES, Suite

    distribution = EnvDistribution("grid-tiny", "Grid-small", lifetimes=(5, 10))
    suite = Suite(
        "grid-tiny",
        envs=distribution.draws(0, 1),
        total_timesteps=3200,
        short_budget=3200,
        validation=distribution.draws(1_000_000, 1),
        heldout=("Grid-sparse",),
        default_seeds=1,
        distribution=distribution,
    )
    monkeypatch.setitem(SUITES, "grid-tiny", suite)


# an LPG ES run and its resume (~220 s in .ci/run on 2 cores); ES resume stays in CI (test_es)
@pytest.mark.long
def test_an_lpg_es_run_is_archived_scored_and_resumes_to_the_same_state(tmp_path, tiny_grid):
    """Two generations in one session, or one and a resume: the same curriculum, history and
    ES mean; the export is an lpg candidate scored on every role with recorded seeds."""
    options = dict(
        task="lpg",
        suite="grid-tiny",
        population=4,
        member_seeds=1,
        env_workers=2,
        export_every=2,
        train_seeds=1,
        seed_values=[3],
        curriculum="groove",
        buffer_size=4,
        heldout=False,
        eval_updates=5,
    )
    with Archive(tmp_path / "a.db") as archive:
        whole = LPGRun(ESConfig(generations=2, **options), archive).run()
        row = archive.get_run(whole.run_id)
        candidate = archive.candidate(whole.best_id)
    with Archive(tmp_path / "b.db") as archive:
        first = LPGRun(ESConfig(generations=1, **options), archive).run()
        LPGRun(ESConfig(generations=2, **options), archive, resume=first.run_id).run()
        resumed = archive.get_run(first.run_id)
    assert whole.generation == 2 and whole.exports == 1
    strip = lambda h: {k: v for k, v in h.items() if k != "seconds"}  # noqa: E731
    assert [strip(h) for h in row["state"]["history"]] == [
        strip(h) for h in resumed["state"]["history"]
    ]
    assert row["state"]["curriculum"] == resumed["state"]["curriculum"]
    assert row["state"]["es"] == resumed["state"]["es"]
    assert candidate["task"] == "lpg" and candidate["status"] == "passed"
    roles = {e["role"] for e in candidate["outcome"]["env_scores"]}
    assert roles == {"train", "validation"}
    assert all(e["seeds"] == [3] for e in candidate["outcome"]["env_scores"])
    shape, _ = read_lpg_source(candidate["code"])  # data, read by ast, never executed
    assert shape == LPGShape(gru_width=32)


@pytest.mark.slow
def test_plr_scores_levels_by_the_reference_positive_value_loss_and_groove_by_regret():
    for kind in ("plr", "groove"):
        config = ESConfig(
            task="lpg", suite="grid-small", population=4, env_workers=1, curriculum=kind
        ).resolved()
        fitness = LPGFitness(config, LPGShape(gru_width=4), None)
        population = jax.tree.map(
            lambda x: np.stack([x] * 4), init_lpg(jax.random.PRNGKey(0), LPGShape(gru_width=4))
        )
        values, details = fitness(jax.random.split(jax.random.PRNGKey(1), 1), population)
        assert values.tolist() == [0.0, 0.0, 0.0, 0.0]  # identical members: no direction
        entries = {e.seed: e.score for e in fitness.curriculum.buffer.entries()}
        for i, seed in enumerate(fitness.last["levels"]):
            reference, pvl = fitness.references[str(seed)]
            expected = pvl if kind == "plr" else reference - fitness.last["returns"][i]
            assert entries[seed] == pytest.approx(expected)
