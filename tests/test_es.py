"""Black-box ES over the LPO meta-network: the network's PPO limit, the search, its exports
through the real sandboxed cascade, and exact resume from the archive."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import report_pages

from metarl.archives.store import Archive
from metarl.blackbox import es, open_lite
from metarl.blackbox.config import ESConfig, ESConfigError
from metarl.blackbox.export import ExportError, lpo_source, read_lpo_source
from metarl.evaluation.stages import trace_candidate
from metarl.evaluation.static_check import check_task_source
from metarl.report.page import write_report
from metarl.rl import lpo
from metarl.rl.components import ppo_clip_drift
from metarl.rl.ppo import make_train
from metarl.rl.suites import get_suite
from metarl.rl.training import seed_keys
from metarl.tasks import get_task

# the ES's seed in the tests whose outcome depends on it (`METARL_TEST_SEED=7 pytest ...`)
SEED = int(os.environ.get("METARL_TEST_SEED", "0"))
# 16 updates of 4 envs x 128 steps on CartPole: seconds per program, enough to rank members
TIMESTEPS = 8192
CONFIG = ESConfig(
    suite="smoke",
    population=4,
    generations=3,
    hidden=8,
    member_seeds=1,
    timesteps=TIMESTEPS,
    export_every=3,
    train_seeds=2,
    seed_values=[0, 1],
)


@pytest.mark.parametrize(
    "make_meta_train, zero_params",
    [
        (lpo.make_meta_train, lpo.zero_params),  # PPO-clip
        (open_lite.make_open_lite_train, open_lite.zero_params),  # Adam
    ],
    ids=["lpo network is ppo-clip", "open-lite network is adam"],
)
def test_zero_weight_network_trains_exactly_like_ppo_with_adam(make_meta_train, zero_params):
    config = get_suite("smoke").config("CartPole-v1", TIMESTEPS)
    keys = seed_keys([0, 1])
    ppo = jax.jit(jax.vmap(make_train(config)))(keys)
    meta = jax.jit(jax.vmap(make_meta_train(config), in_axes=(0, None)))(keys, zero_params())
    for name, a, b in zip(ppo._fields, ppo, meta):
        if a is None or b is None:  # the meta-RL curves, which PPO does not record
            assert a is None and b is None, name
            continue
        assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), name


def test_lpo_drift_is_nonnegative_and_zero_with_zero_slope_at_ratio_one():
    params = jax.tree.map(lambda w: 5 * w, lpo.init_params(jax.random.PRNGKey(3), 16))
    samples = lpo.sample_drift(lambda r, a, e: lpo.lpo_drift(params, r, a, e), lpo.drift_grid(32))
    assert samples.value.min() >= 0.0 and samples.value.max() > 0.1  # the network does act
    # every feature is 0 at r = 1, so the bias-free network is exactly 0 there and inside the
    # dead zone: the drift and its slope vanish (only very near 1 for weights this large)
    for advantage in (-3.0, 0.5, 4.0):
        value, slope = jax.value_and_grad(lpo.lpo_drift, argnums=1)(
            params, jnp.float32(1.0), advantage, 0.2
        )
        assert float(value) == 0.0 and float(slope) == 0.0


def test_exported_network_source_passes_the_static_check_and_computes_the_same_drift():
    params = lpo.init_params(jax.random.PRNGKey(1))  # the paper's width, 128
    source = lpo_source(params, "a test network")
    assert check_task_source(source, get_task("drift")).ok
    read = read_lpo_source(source)
    assert all(np.array_equal(a, b) for a, b in zip(lpo.weights(read), lpo.weights(params)))
    namespace = {"jax": jax, "jnp": jnp}
    exec(source, namespace)  # generated, trusted source (the cascade runs it in the sandbox)
    grid = lpo.drift_grid(48)
    exported = lpo.sample_drift(namespace["drift"], grid)
    direct = lpo.sample_drift(lambda r, a, e: lpo.lpo_drift(params, r, a, e), grid)
    assert np.array_equal(exported.value, direct.value)
    assert np.array_equal(exported.slope, direct.slope)


def test_a_network_too_wide_for_the_static_check_is_refused_with_the_width_that_fits():
    with pytest.raises(ExportError, match=r"at most width \d+ fits"):
        lpo_source(lpo.init_params(jax.random.PRNGKey(0), 512))


def test_es_options_that_no_run_can_use_are_refused():
    with pytest.raises(ESConfigError, match="even"):
        ESConfig(population=5).resolved()
    with pytest.raises(ESConfigError, match="drift"):
        ESConfig(task="reward").resolved()


def test_a_short_es_run_removes_most_of_the_harmful_drift_of_a_deliberately_bad_mean():
    # drift = 0.3 * (r - 1) * A where positive: once a sample's ratio has moved in the direction
    # of its advantage, it cancels 30% of that sample's policy gradient. Measured (CPU-2, 16
    # held-out keys, 20k steps): the normalised return is 0.152 at gain 0 (PPO-clip), 0.102 at
    # 0.2, 0.050 at 0.4 and 0.045 (a random policy) from 0.5 up, so at 0.3 the fitness has a
    # slope the ES can follow. (A gain of 0.9 sits on the flat part: there the ES walked at
    # random, and its gain ended anywhere in -0.6..1.6 over seeds 1-10.)
    config = ESConfig(
        suite="smoke", population=8, hidden=8, member_seeds=1, timesteps=20_000, lr=0.05
    )
    config = ESConfig(**{**config.to_dict(), "sigma": 0.05, "sigma_floor": 0.02})
    hidden = np.zeros((8, 8), np.float32)
    hidden[4] = 0.1  # the (r - 1) * A feature, in tanh's linear range
    bad = lpo.from_weights(hidden, np.full(8, 0.375, np.float32))
    fitness_of = es.make_population_fitness(config, {"CartPole-v1": es.Normaliser(500.0, 0.0)})
    strategy = es.make_strategy(config)
    state = strategy.init(jax.random.PRNGKey(0), bad, strategy.default_params)

    def harmful_gain(params) -> float:
        """The network's first-order coefficient on (r - 1) * A (log r * A is the same to first
        order): its output is ~ gain * (r - 1) * A near r = 1."""
        hidden, out = lpo.weights(params)
        return float(out @ (hidden[4] + hidden[6]))

    assert harmful_gain(strategy.get_mean(state)) == pytest.approx(0.3)
    rng = jax.random.PRNGKey(SEED)
    for _ in range(8):
        state, rng, fitness = es.es_generation(
            strategy, fitness_of, state, rng, 1, strategy.default_params
        )
        assert np.all(np.isfinite(fitness)) and np.all(fitness > 0)
    # Which member ranks first is RL noise (it changes with the seed and the CPU model); the
    # way the mean goes follows the fitness's slope, the same for every seed measured (CPU-2,
    # 8 generations, ES seeds 0-20): the gain ends at -0.32..-0.03 for all 21 (it overshoots 0
    # on Adam's momentum), and was at most -0.005 after 6 generations. The mean's held-out
    # return is another matter: over ES seeds 1-8 it rose for 7 (0.065 -> 0.086..0.145) and
    # fell for one (0.053), as the other weights wander, so it is not asserted.
    assert harmful_gain(strategy.get_mean(state)) < 0.15


@pytest.fixture(scope="module")
def es_archive(tmp_path_factory):
    """An uninterrupted ES run of 3 generations with one export, in a real archive."""
    path = tmp_path_factory.mktemp("es") / "metarl.db"
    events = []
    with Archive(path) as archive:
        result = es.ESRun(CONFIG, archive, on_event=lambda k, d: events.append((k, d))).run()
    return path, result, events


def test_es_run_exports_its_mean_as_a_candidate_the_cascade_scores(es_archive):
    path, result, events = es_archive
    assert result.status == "finished" and result.generation == 3 and result.exports == 1
    assert [d["generation"] for k, d in events if k == "generation"] == [1, 2, 3]
    with Archive(path) as archive:
        run = archive.get_run(result.run_id)
        (row,) = archive.run_candidates(result.run_id)
    assert run["method"] == "es" and run["generation"] == 3
    assert row["status"] == "passed", row["reason"]
    assert row["method"] == "es" and row["generation"] == 3 and row["operator"] == "es-mean"
    assert row["meta"]["es_generation"] == 3 and row["meta"]["hidden"] == 8
    assert row["fitness"] is not None and row["fitness_low"] <= row["fitness"]
    assert "jnp.array(" in row["code"]


def test_export_scores_what_the_network_scores_trained_alone_on_the_same_seeds(es_archive):
    path, result, _ = es_archive
    with Archive(path) as archive:
        (row,) = archive.run_candidates(result.run_id)
        (evaluation,) = [
            e for e in archive.evaluations(row["id"]) if e["stage"] == "full" and not e["heldout"]
        ]
    # the same network trained in-process, one member alone, on the cascade's seeds
    config = get_suite("smoke").config("CartPole-v1", TIMESTEPS)
    network = read_lpo_source(row["code"])
    alone = jax.jit(jax.vmap(lpo.make_meta_train(config), in_axes=(0, None)))(
        seed_keys(row["seeds"]), network
    )
    returns = np.asarray(alone.final_return)
    # The cascade trains the exported artifact inside a conditional (a batch's switch), the
    # ES trains the network directly; at this budget both give the same returns (measured:
    # [37.625, 42.533] both ways). A member vmapped in a population is another layout: its
    # numbers may differ, which is why the ES fitness never ranks anything.
    assert evaluation["returns"] == returns.tolist()


@pytest.mark.slow  # end to end: a second ES run, interrupted and resumed (~35 s)
def test_an_interrupted_es_run_resumes_with_the_same_state_and_mean(es_archive, tmp_path):
    reference_path, reference, _ = es_archive

    def interrupt_after_first_generation(kind, data):
        if kind == "generation" and data["generation"] == 1:
            raise KeyboardInterrupt

    path = tmp_path / "metarl.db"
    with Archive(path) as archive:
        first = es.ESRun(CONFIG, archive, on_event=interrupt_after_first_generation).run()
        assert first.status == "interrupted" and first.generation == 1 and first.exports == 0
        resumed = es.ESRun(CONFIG, archive, resume=first.run_id).run()
        state = archive.get_run(first.run_id)["state"]
        (row,) = archive.run_candidates(first.run_id)
    assert resumed.status == "finished" and resumed.generation == 3
    with Archive(reference_path) as archive:
        expected = archive.get_run(reference.run_id)["state"]
        (expected_row,) = archive.run_candidates(reference.run_id)
    assert state["es"] == expected["es"] and state["rng"] == expected["rng"]
    assert row["hash"] == expected_row["hash"]  # the same mean, exported byte for byte


def test_the_report_draws_fitness_and_sigma_per_generation(es_archive, tmp_path):
    path, result, events = es_archive
    with Archive(path) as archive:
        history = archive.get_run(result.run_id)["state"]["history"]
        write_report(archive, [result.run_id], tmp_path / "es.html")
    shown = [d for k, d in events if k == "generation"]
    assert [h["generation"] for h in history] == [1, 2, 3]
    for entry, event in zip(history, shown):  # what the run measured, generation by generation
        assert entry["best"] == float(event["fitness"].max())
        assert entry["sigma"] == event["sigma"]
    es = report_pages.sections((tmp_path / "es.html").read_text())[(result.run_id, "es")]
    table = report_pages.rows(es, "generation")
    for entry in history:
        assert table[str(entry["generation"])][1:5] == [
            f"{entry['best']:.3f}",
            f"{entry['mean']:.3f}",
            f"{entry['std']:.3f}",
            f"{entry['sigma']:.4f}",
        ]


def test_resuming_with_other_search_options_is_refused(es_archive):
    path, result, _ = es_archive
    other = ESConfig(**{**CONFIG.to_dict(), "population": 6})
    with Archive(path) as archive, pytest.raises(es.ESError, match="other ES options"):
        es.ESRun(other, archive, resume=result.run_id).run()


def test_the_ppo_clip_drift_is_the_zero_network_on_the_distillation_grid():
    grid = lpo.drift_grid(32)
    zero = lpo.sample_drift(lambda r, a, e: lpo.lpo_drift(lpo.zero_params(8), r, a, e), grid)
    ppo = lpo.sample_drift(ppo_clip_drift, grid)
    assert np.array_equal(zero.value, ppo.value) and np.array_equal(zero.slope, ppo.slope)


def test_exported_open_lite_rule_passes_the_probes_and_updates_like_the_network():
    params = jax.tree.map(lambda w: 0.5 * w, open_lite.init_params(jax.random.PRNGKey(2)))
    source = open_lite.open_lite_source(params, "a test OPEN-lite network")
    task = get_task("optimizer")
    assert check_task_source(source, task).ok
    traced = trace_candidate(task, source, 0, "cpu")
    assert traced.ok, traced.reason
    namespace = {"jax": jax, "jnp": jnp}
    exec(source, namespace)  # generated, trusted source
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    grad, param = (jax.random.normal(k, (3, 5)) for k in keys[:2])
    momentum = jax.random.normal(keys[2], (5, 3, 5)) * 0.1
    state = jnp.abs(jax.random.normal(keys[3], (4, 3, 5)))
    args = (grad, param, momentum, state, jnp.int32(7), jnp.float32(0.3), jnp.float32(2.5e-4))
    exported = namespace["optimizer"](*args)
    direct = open_lite.open_lite_rule(params)(*args)
    for a, b in zip(exported, direct):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(exported[0], open_lite.open_lite_rule(open_lite.zero_params())(*args)[0])


def test_an_optimizer_population_trains_as_one_program_with_finite_fitness():
    config = ESConfig(task="optimizer", suite="smoke", population=2, timesteps=TIMESTEPS)
    config = config.resolved()
    assert config.hidden == open_lite.OPEN_LITE_HIDDEN
    fitness_of = es.make_population_fitness(config, {"CartPole-v1": es.Normaliser(500.0, 0.0)})
    strategy = es.make_strategy(config)
    state = strategy.init(jax.random.PRNGKey(0), open_lite.zero_params(), strategy.default_params)
    state, _, fitness = es.es_generation(
        strategy, fitness_of, state, jax.random.PRNGKey(1), 1, strategy.default_params
    )
    assert fitness.shape == (2,) and np.all(np.isfinite(fitness)) and np.all(fitness > 0)
