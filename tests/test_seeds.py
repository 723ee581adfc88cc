"""Training seeds: drawn where no candidate can know them, paired with the baseline, recorded,
re-runnable, fresh for confirmations, and pinned only on request (evaluation/seeds.py)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from metarl.evaluation import baseline_cache
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.seeds import (
    SEED_LIMIT,
    SeedError,
    SeedSource,
    TrainingSeeds,
    parse_seed_values,
    pinned_extension,
    pool_size,
)
from metarl.evaluation.settings import CascadeSettings, run_configs
from metarl.rl.suites import get_suite
from metarl.rl.training import BatchProgram
from metarl.rl.verifier.artifact import export_variants, load_exported
from metarl.tasks import get_task
from metarl.tasks.behaviour import training_sizes
from metarl.tasks.candidate import load_function

BASE = dict(
    suite="smoke", seeds=2, total_timesteps=4096, skip_short=True, heldout=False, timeout_s=120
)
DRIFT = get_task("drift")
OPTIMIZER = get_task("optimizer")
PPO = DRIFT.baseline_program().source
ADAM = OPTIMIZER.baseline_program().source


# --- the seed source, without training --------------------------------------------------------
def test_a_drawn_pool_holds_distinct_values_from_the_whole_range_and_differs_each_time():
    first, second = SeedSource(2), SeedSource(2)
    assert len(first.pool) == pool_size(2) == 4 == len(set(first.pool))
    assert pool_size(2, 4) == 8 and pool_size(4, 4) == 8
    assert all(0 <= value < SEED_LIMIT for value in first.pool)
    assert first.pool != second.pool  # 2^31-value draws: equal pools would be a broken source
    assert set(first.pool) != {0, 1, 2, 3}


def test_a_batch_draws_its_seeds_from_the_pool_without_the_excluded_ones():
    source = SeedSource(2, pool=[11, 22, 33, 44])
    drawn = source.draw(exclude=[11, 33])
    assert sorted(drawn.values) == [22, 44] and not drawn.pinned
    with pytest.raises(SeedError, match="unused values"):
        source.draw(3, exclude=[11, 33])


def test_pinned_values_are_used_as_given_and_extended_past_the_largest_for_confirmations():
    source = SeedSource(2, pinned=[5, 3])
    assert source.draw() == TrainingSeeds((5, 3), pinned=True)
    assert source.draw(4, exclude=[5, 3]).values == (6, 7, 8, 9)
    assert pinned_extension([0, 1], 4, ()) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "text, message",
    [("0,x", "integers"), ("1,1", "distinct"), ("-1", r"\[0, "), ("", "at least one")],
)
def test_malformed_seed_values_are_refused_with_a_reason(text, message):
    with pytest.raises(SeedError, match=message):
        parse_seed_values(text)


def test_seed_values_parse_from_text_or_a_list():
    assert parse_seed_values(" 0, 7,3 ") == [0, 7, 3]
    assert parse_seed_values([4, 2]) == [4, 2]
    assert parse_seed_values(None) is None


def test_the_settings_never_send_the_pool_to_a_worker_and_never_imply_seed_values():
    settings = CascadeSettings(seeds=2, seed_pool=[9, 8, 7, 6])
    assert settings.job_settings()["seed_pool"] is None
    with pytest.raises(ValueError, match="no training seed values"):
        settings.training_seeds()


# --- per-seed baselines are exact --------------------------------------------------------------
def test_a_seeds_returns_do_not_depend_on_the_seeds_trained_beside_it():
    """What makes caching the baseline per (config, seed) exact."""
    config = get_suite("smoke").config("CartPole-v1", 4096)
    function = load_function(PPO, "drift")

    def per_seed(seeds):
        program = BatchProgram(config, lambda i: DRIFT.select([function], i), 1, seeds)
        _, runs = program.advance_per_seed(program.start(0), 0, config.num_updates)
        return {run.seeds[0]: run for run in runs}

    alone, beside = per_seed([0]), per_seed([517, 0, 90210])
    assert alone[0].final_returns == beside[0].final_returns
    assert alone[0].curve == beside[0].curve


# --- the evaluator -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(CascadeSettings(**BASE), workers=1, prewarm=False) as the_evaluator:
        yield the_evaluator


def seeds_of(outcome) -> list[int]:
    return outcome.env_scores[0].seeds


def test_each_batch_trains_on_fresh_unpredictable_seeds_paired_with_its_baseline(evaluator):
    [first] = evaluator.evaluate_batch([PPO], "drift")
    [second] = evaluator.evaluate_batch([PPO], "drift")
    for outcome in (first, second):
        assert outcome.passed, outcome.reason
        assert outcome.fitness == 1.0  # the baseline program, on exactly the baseline's seeds
        assert not outcome.seeds_pinned
        assert len(seeds_of(outcome)) == 2 and seeds_of(outcome) != [0, 1]
        assert set(seeds_of(outcome)) <= set(evaluator.seeds.pool)
    assert seeds_of(first) != seeds_of(second) or first.env_scores[0].returns == (
        second.env_scores[0].returns
    )  # the same draw twice (1 in 28) must at least give the same numbers


def test_a_score_reruns_exactly_on_its_recorded_seeds(evaluator):
    [scored] = evaluator.evaluate_batch([ADAM], "optimizer")
    recorded = seeds_of(scored)
    with Evaluator(CascadeSettings(**BASE), workers=1, prewarm=False) as other:
        [again] = other.evaluate_batch([ADAM], "optimizer", seeds=recorded)
    assert seeds_of(again) == recorded
    assert again.env_scores[0].returns == scored.env_scores[0].returns
    assert again.fitness == scored.fitness == 1.0


def test_the_baseline_is_cached_per_seed_of_its_layout(evaluator, metarl_cache):
    [outcome] = evaluator.evaluate_batch([PPO], "drift")
    program = DRIFT.baseline_program()
    config = get_suite("smoke").config("CartPole-v1", 4096)
    from metarl.tasks.candidate import source_hash

    layout = tuple(seeds_of(outcome))
    assert list(layout) == sorted(layout)  # drawn sets are sorted: a set drawn again reuses it
    for seed in layout:
        key = baseline_cache.baseline_key(
            "drift", source_hash(program.source), config, seed, config.num_updates, (), layout
        )
        entry = baseline_cache.load(key)
        assert entry is not None and entry["seeds"] == [seed]


def test_the_call_sizes_a_trainer_traced_are_kept_beside_the_baselines_for_later_jobs(
    evaluator,
):
    [outcome] = evaluator.evaluate_batch([PPO], "drift")
    seeds = seeds_of(outcome)
    settings = CascadeSettings(**BASE, seed_values=seeds)
    function = load_function(PPO, "drift")
    blobs = export_variants(DRIFT.per_element(function), DRIFT.element_signature, "cpu")
    variants = load_exported(blobs, DRIFT.element_signature, "cpu")
    for config in run_configs(settings):
        key = baseline_cache.call_sizes_key("drift", config, len(seeds))
        entry = baseline_cache.load(key, baseline_cache.valid_sizes)
        assert entry is not None
        kept = {(variant, role): tuple(sizes) for variant, role, sizes in entry["sizes"]}
        assert kept == training_sizes(DRIFT, variants, [config], seeds)  # traced here, the same
    # the evaluator's next trainer job on these seeds carries them: its trainer traces nothing
    job = evaluator._batches._job(DRIFT, [], TrainingSeeds(tuple(seeds)), {}, {}, False)
    keys = [baseline_cache.call_sizes_key("drift", c, 2) for c in run_configs(settings)]
    kept = [baseline_cache.load(key, baseline_cache.valid_sizes)["sizes"] for key in keys]
    assert job["call_sizes"] == kept


def test_the_control_job_without_candidates_trains_the_baseline_program(evaluator):
    """The control that tells an evaluator's fault from a candidate's (batch_training.py) is a
    job with no candidate: it carries the batch's settings all the same (it once sent none,
    so the control always failed and every unexplained batch failure read as the evaluator's)."""
    seeds = sorted(evaluator.seeds.draw().as_list())
    references = evaluator.references("drift", seeds)
    assert evaluator._batches._trainer_works(DRIFT, TrainingSeeds(tuple(seeds)), references, False)


@pytest.mark.parametrize(
    "sizes",
    [
        [],
        [["epsilon=0.2", "forward", [0]]],
        [["epsilon=0.2", "forward", [True]]],
        [["epsilon=0.2", "grad", [256]]],
        [["epsilon=0.2", "vjp", [2**31]]],
        [["epsilon=0.2", "vjp", "256"]],
        [[None, "vjp", [256]]],
    ],
)
def test_malformed_call_sizes_are_never_kept(sizes):
    assert not baseline_cache.valid_sizes({"sizes": sizes})
    assert baseline_cache.valid_sizes({"sizes": [["epsilon=0.2", "vjp", [1, 256]]]})


def test_a_confirmation_draws_seeds_the_candidate_was_not_trained_on(evaluator):
    used = list(evaluator.seeds.pool[:-2])
    [outcome] = evaluator.evaluate_batch([PPO], "drift", exclude_seeds=used)
    assert sorted(seeds_of(outcome)) == sorted(evaluator.seeds.pool[-2:])


def _first_initial_weight(seed: int) -> float:
    """The first non-zero initial weight of the agent the smoke config trains on `seed`."""
    config = get_suite("smoke").config("CartPole-v1", 4096)
    function = load_function(ADAM, "optimizer")
    program = BatchProgram(config, lambda i: OPTIMIZER.select([function], i), 1, [seed])
    runner = program.start(0)
    weights = np.concatenate([np.asarray(x).reshape(-1) for x in jax.tree.leaves(runner.params)])
    return float(weights[np.flatnonzero(weights)[0]])  # biases start at 0: skip them


def seed_keyed_rule(value: float) -> str:
    """Adam, except when a weight's initial value is `value` (training seed 0's first weight,
    known to anyone while seeds were 0..n-1): then it writes NaN, a signal no run can miss
    (an elementwise controller keyed on the seeds, reduced to its key)."""
    body = ADAM.split("def optimizer", 1)[1].split("\n", 1)[1]
    body = body.replace(
        "    return update, new_state",
        f"    known = jnp.where(step == 1, jnp.where(param == {value!r}, 7.0, 0.0), state[2])\n"
        "    update = jnp.where(known == 7.0, jnp.nan, update)\n"
        "    new_state = new_state.at[2].set(known)\n"
        "    return update, new_state",
    )
    return "def optimizer(grad, param, momentum, state, step, progress, lr):\n" + body


@pytest.mark.slow  # end to end: several batches of drawn seeds (~40 s)
def test_a_rule_keyed_on_known_seeds_fires_on_them_and_never_on_drawn_seeds(evaluator):
    keyed = seed_keyed_rule(_first_initial_weight(0))
    with Evaluator(CascadeSettings(**{**BASE, "seed_values": [0, 1]}), prewarm=False) as pinned:
        [on_known] = pinned.evaluate_batch([keyed], "optimizer")
    assert on_known.seeds_pinned and not on_known.passed
    # the reason names the seed by its position in the batch, never by its value
    assert "NaN" in on_known.reason and "training seed 1 of 2" in on_known.reason
    [on_drawn] = evaluator.evaluate_batch([keyed], "optimizer")
    assert on_drawn.passed, on_drawn.reason  # the key never fired
    assert seeds_of(on_drawn) != [0, 1]


@pytest.mark.slow  # classic's CartPole at 1e5 steps, where a seed's returns depend on its layout
def test_the_baseline_program_scores_exactly_one_against_itself_in_every_layout():
    """1, 2 and 4 seeds, the last two beside seeds whose baselines are cached from other
    layouts (seed 11 returns 269.42 alone and 293.19 beside 22 here): each batch is paired
    with the baseline trained on exactly its seeds, in its order."""
    settings = CascadeSettings(
        suite="classic",
        envs=["CartPole-v1"],
        seeds=1,
        total_timesteps=100_000,
        skip_short=True,
        heldout=False,
        validation=False,
        timeout_s=600,
    )
    with Evaluator(settings, workers=1, prewarm=False) as evaluator:
        for seeds in ([11], [11, 22], [33, 22, 11, 44]):
            [outcome] = evaluator.evaluate_batch([PPO], "drift", seeds=seeds)
            assert outcome.passed, outcome.reason
            [score] = outcome.env_scores
            assert score.seeds == seeds
            assert score.normalised == 1.0 and outcome.fitness == 1.0, (seeds, score.returns)
            assert float(np.mean(score.returns)) == score.baseline_mean
