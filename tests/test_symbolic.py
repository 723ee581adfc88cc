"""Symbolic distillation (metarl/symbolic): pyoperon fits of known drifts, the candidates made
from them, and how failures are reported.

The searches are small (a 32 x 32 grid, populations of 100-300, one thread) and seeded, so each
runs in a few seconds; their time limit is far above that, so a result depends on the seed and
not on the machine's load. With one thread pyoperon is deterministic given its seed on one
machine, but not from one CPU model to the next: the samples (XLA) and the fitness (numpy's
BLAS) round differently there, and a genetic search amplifies the last bit into another run.
So a seed's outcome is a draw, and a single search at these sizes misses the formula for 15-18%
of seeds (measured below). A test that needs the formula found therefore restarts the search
from the next seed, up to ATTEMPTS searches, and asserts on the first fit that found it: it
fails only if every attempt misses, which at the measured rates is about 1 in 10^4 (the misses
are not correlated from one seed to the next: no two seeds in a row missed for two of the three
searches, and at most two in a row for the third). The bounds are the errors measured at these
settings with a wide margin, far below what a fit that missed the formula gives (errors of order
0.02 and above).

The first seed is METARL_TEST_SEED (default 0), so the suite can be run from other seeds.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# pyoperon is the `symbolic` extra; without it this module is skipped, not an import error
op = pytest.importorskip("pyoperon")

from metarl.evaluation import stages  # noqa: E402
from metarl.evaluation.static_check import check_task_source  # noqa: E402
from metarl.platform import backend  # noqa: E402
from metarl.rl.lpo import DriftGrid, drift_grid, sample_drift  # noqa: E402
from metarl.symbolic import (  # noqa: E402
    SymbolicError,
    SymbolicFit,
    SymbolicSettings,
    assess,
    distil_drift,
    drift_function,
    fit_drift,
    parse,
    pysr_backend,
    readable,
)
from metarl.symbolic import fit as fit_module  # noqa: E402
from metarl.symbolic import operon as operon_backend  # noqa: E402
from metarl.symbolic.expression import Inputs, evaluate, format_constant  # noqa: E402
from metarl.tasks import get_task  # noqa: E402

DRIFT = get_task("drift")
POINTS = 32
# a known closed form a short search finds: 0 with zero slope at r = 1, >= 0 everywhere
KNOWN = "abs(A) * square(r1)"


def known_drift(ratio, advantage, epsilon):
    return jnp.abs(advantage) * jnp.square(ratio - 1.0)


def ppo_clip(ratio, advantage, epsilon):
    return jax.nn.relu((ratio - jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)) * advantage)


SEED = int(os.environ.get("METARL_TEST_SEED", "0"))
SMALL = SymbolicSettings(
    points=POINTS, population_size=100, generations=20, max_time_s=300, rng_seed=SEED
)
# searches from seeds SEED, SEED + 1, ...: every attempt misses with probability ~p^ATTEMPTS for
# a per-search miss rate p of 0.15-0.18 (measured below), i.e. about 1e-4
ATTEMPTS = 5


def first_found(
    search: Callable[[SymbolicSettings], SymbolicFit],
    settings: SymbolicSettings,
    found: Callable[[SymbolicFit], bool],
) -> SymbolicFit:
    """The first fit, of searches from seeds settings.rng_seed, + 1, ... (ATTEMPTS at most),
    that `found` accepts; the last fit if none does (the caller's assertions then fail)."""
    for attempt in range(ATTEMPTS):
        fit = search(replace(settings, rng_seed=settings.rng_seed + attempt))
        if found(fit):
            break
    return fit


def value_fit_found(fit: SymbolicFit) -> bool:
    return fit.value_error < 1e-8 and fit.slope_error < 1e-8


@pytest.fixture(scope="module")
def samples():
    return sample_drift(known_drift, drift_grid(POINTS))


@pytest.fixture(scope="module")
def known_fit():
    return first_found(lambda settings: distil_drift(known_drift, settings), SMALL, value_fit_found)


def run_source(source: str):
    """The `drift` of generated source (trusted: this package wrote it)."""
    namespace = {"jax": jax, "jnp": jnp}
    exec(compile(source, "<symbolic>", "exec"), namespace)  # noqa: S102 - generated in-test
    return namespace["drift"]


def test_value_objective_recovers_a_known_drift_to_float32_precision(known_fit, samples):
    # measured (CPU-2, one search per seed, seeds 0-59): the 51 searches that found it have
    # value MSE 3e-12..3e-11 and slope MSE 0..1.2e-11 (the 1e-6 margin alone contributes
    # 1e-12); the 9 that missed (seeds 15, 30, 31, 36, 38, 39, 44, 53, 57) have value MSE 0.16 to
    # 85. The drift's values have variance ~1100 on this grid.
    assert value_fit_found(known_fit), (known_fit.value_error, known_fit.slope_error)
    assert known_fit.backend == "operon" and known_fit.objective == "value"
    assert 0 < known_fit.size and 0 < known_fit.depth
    # the readable formula reads back as the same function
    inputs = Inputs.of(samples.ratio, samples.advantage)
    np.testing.assert_allclose(
        evaluate(parse(known_fit.expression), inputs, np),
        evaluate(known_fit.tree, inputs, np),
        rtol=1e-5,
        atol=1e-5,
    )


def test_generated_source_passes_the_static_check_and_computes_the_reported_fit(known_fit, samples):
    report = check_task_source(known_fit.source, DRIFT)
    assert report.ok, report.reason
    drift = run_source(known_fit.source)
    from_source = sample_drift(drift, DriftGrid(samples.ratio, samples.advantage))
    from_tree = sample_drift(
        drift_function(known_fit.tree), DriftGrid(samples.ratio, samples.advantage)
    )
    np.testing.assert_allclose(from_source.value, from_tree.value, rtol=1e-6, atol=1e-6)
    value_error = np.mean(np.square(from_source.value.astype(np.float64) - samples.value))
    slope_error = np.mean(np.square(from_source.slope.astype(np.float64) - samples.slope))
    assert value_error == pytest.approx(known_fit.value_error, rel=1e-3, abs=1e-10)
    assert slope_error == pytest.approx(known_fit.slope_error, rel=1e-3, abs=1e-10)


def test_generated_drift_is_zero_and_flat_at_ratio_one_and_never_negative(known_fit):
    source_drift = run_source(known_fit.source)
    drift = jax.jit(lambda ratio, advantage: source_drift(ratio, advantage, 0.2))
    advantages = jnp.asarray([-8.0, -3.0, -0.5, 0.0, 0.5, 3.0, 8.0], jnp.float32)
    ones = jnp.ones_like(advantages)
    at_one = drift(ones, advantages)
    slopes = jax.jit(jax.vmap(jax.grad(drift)))(ones, advantages)
    assert at_one.dtype == jnp.float32 and at_one.shape == ones.shape
    assert np.all(np.asarray(at_one) == 0.0)
    assert np.all(np.asarray(slopes) == 0.0)
    grid = drift_grid(64)
    values = np.asarray(drift(grid.ratio.reshape(64, 64), grid.advantage.reshape(64, 64)))
    assert values.shape == (64, 64) and values.dtype == np.float32
    assert values.min() >= 0.0


def test_generated_candidate_passes_the_task_probes_without_warnings(known_fit):
    traced = stages.trace_candidate(DRIFT, known_fit.source, probe_seed=0, platform=backend())
    assert traced.ok, traced.reason
    assert traced.warnings == []


def test_slope_objective_fits_the_slopes_and_reports_the_candidates_slope_error(samples):
    settings = SymbolicSettings(
        objective="slope", population_size=200, generations=40, max_time_s=300, rng_seed=SEED
    )
    fit = first_found(
        lambda settings: fit_drift(samples, settings), settings, lambda f: f.slope_error < 1e-4
    )
    # measured (CPU-2, one search per seed, seeds 0-39): the exact form has slope MSE
    # 1.7e-6..2.4e-6 (30 seeds), close forms 1.2e-5..9.7e-5 (seeds 6, 7, 33); the 7 that missed
    # (seeds 3, 17, 21, 23, 31, 35, 38) have 0.44 to 13. The slopes have variance ~280. The error
    # is the candidate's exact (JAX) slope error.
    assert fit.objective == "slope"
    assert fit.slope_error < 1e-4
    grid = DriftGrid(samples.ratio, samples.advantage)
    slopes = sample_drift(run_source(fit.source), grid).slope.astype(np.float64)
    assert np.mean(np.square(slopes - samples.slope)) == pytest.approx(fit.slope_error, rel=1e-3)


def test_slope_objective_finds_ppo_clip_as_a_max_of_two_lines():
    samples = sample_drift(ppo_clip, drift_grid(POINTS))
    # the operators a max of two lines needs (with the default ones, aq, square and tanh, one
    # search in four missed: seeds 2, 6, 7, 13, 15 of 0-19)
    settings = SymbolicSettings(
        objective="slope",
        operators=("add", "sub", "mul", "fmax", "fmin", "abs"),
        population_size=300,
        generations=50,
        max_time_s=300,
        rng_seed=SEED,
    )
    fit = first_found(
        lambda settings: fit_drift(samples, settings), settings, lambda f: f.slope_error < 1e-6
    )
    # measured (CPU-2, one search per seed, seeds 0-39): the 33 that found it have slope MSE
    # 2.2e-9..3.0e-9 and value MSE 9e-5..0.037 (the kink at 1 +- eps falls between grid
    # points); the 7 that missed (seeds 10, 18, 20, 29, 31, 36, 38) stop at 0.022 to 0.155.
    # The slopes' variance is ~9.7.
    assert fit.slope_error < 1e-6
    assert fit.value_error < 0.1
    assert "max" in fit.expression or "min" in fit.expression


def test_a_fit_that_is_not_finite_is_refused_with_a_symbolic_error(samples):
    with pytest.raises(SymbolicError, match="not finite"):
        assess(parse("square(1e30 * A) + r1"), samples)
    with pytest.raises(SymbolicError, match="not finite on the samples"):
        assess(parse("log(r1)"), samples)


def test_fit_drift_raises_rather_than_returning_a_candidate_that_is_not_finite(
    samples, monkeypatch
):
    monkeypatch.setitem(
        fit_module.SEARCHES, "operon", lambda inputs, value, slope, settings: parse("log(r1)")
    )
    with pytest.raises(SymbolicError, match=r"f = log\(r1\) is not finite"):
        fit_drift(samples, SMALL)


def test_samples_that_are_not_finite_are_refused_before_the_search(samples):
    value = samples.value.copy()
    value[5] = np.nan
    with pytest.raises(SymbolicError, match="the drift to fit is not finite: its value is nan"):
        fit_drift(samples._replace(value=value), SMALL)


def test_a_constant_that_is_not_a_float32_cannot_be_written_as_source(samples):
    with pytest.raises(SymbolicError, match="finite float32"):
        assess(parse("1e39 * r1"), samples)


def test_constants_are_written_as_decimals_that_read_back_as_the_same_float32():
    values = np.random.default_rng(0).standard_normal(200).astype(np.float32) * np.float32(
        10.0
    ) ** np.random.default_rng(1).integers(-8, 8, 200)
    for value in values.astype(np.float32):
        assert np.float32(float(format_constant(float(value)))) == value
    assert format_constant(3.0) == "3.0"
    assert format_constant(0.1) == "0.1"


def test_pyoperon_trees_become_expressions_that_compute_what_pyoperon_computes():
    # random trees over the operators that cannot make NaNs (this caught pyoperon 0.6.2's
    # NodeType.Fmin and NodeType.Fmax, which compute max and min); log, sqrt and div are left
    # out: on NaNs, C++'s fmax/fmin return the other operand and jnp.maximum returns NaN
    ratio = np.exp(np.random.default_rng(0).uniform(-2, 2, 256)).astype(np.float32)
    advantage = np.random.default_rng(1).uniform(-3, 3, 256).astype(np.float32)
    inputs = Inputs.of(ratio, advantage)
    array = np.asfortranarray(np.column_stack([inputs.columns(), advantage]))
    dataset = op.Dataset(array)
    variables = sorted(dataset.Variables, key=lambda variable: variable.Index)
    names = {variable.Hash: name for variable, name in zip(variables, ("log_r", "r1", "A"))}
    problem = op.Problem(dataset)
    primitives = op.NodeType.Constant | op.NodeType.Variable
    for name, node_type in operon_backend.NODE_TYPES.items():
        if name not in ("log", "sqrt", "div"):
            primitives |= node_type
    problem.ConfigurePrimitiveSet(int(primitives))
    pset = problem.PrimitiveSet
    creator = op.BalancedTreeCreator(pset, list(names), 0.0)
    rng = op.RandomGenerator(np.uint64(0))
    rows = op.Range(0, dataset.Rows)
    seen = set()
    for _ in range(200):
        tree = creator(rng, 15, 1, 8)
        expression = operon_backend.to_expression(tree, names)
        seen |= {node.Name for node in tree.Nodes}
        expected = op.Evaluate(tree, dataset, rows).astype(np.float64)
        with np.errstate(all="ignore"):  # float32 overflow, as in pyoperon
            got = np.broadcast_to(evaluate(expression, inputs, np), expected.shape)
        finite = np.abs(expected) < 1e6  # float32 overflow aside
        np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-4, atol=1e-4)
    assert {"fmax", "fmin", "aq", "-", "exp", "tanh", "abs", "square"} <= seen


def test_readable_formulas_parse_back_to_the_same_tree():
    for text in [KNOWN, "max(r1 * A, 0.2 * abs(A)) - min(log_r, 1.0)", "aq(A, r1 - (r1 - 1.0))"]:
        tree = parse(text)
        assert parse(readable(tree)) == tree
    with pytest.raises(SymbolicError, match="cannot read"):
        parse("ratio ** 3")


def test_settings_refuse_an_unknown_objective_backend_or_operator():
    with pytest.raises(ValueError, match="objective"):
        SymbolicSettings(objective="gradient")
    with pytest.raises(ValueError, match="backend"):
        SymbolicSettings(backend="gplearn")
    with pytest.raises(ValueError, match="operators"):
        SymbolicSettings(operators=("add", "sin"))


@pytest.mark.skipif(pysr_backend.available(), reason="PySR is installed")
def test_pysr_backend_without_pysr_raises_a_clear_error(samples):
    with pytest.raises(SymbolicError, match="PySR is not installed"):
        fit_drift(samples, SymbolicSettings(backend="pysr"))


@pytest.mark.skipif(not pysr_backend.available(), reason="PySR is not installed")
def test_pysr_backend_recovers_a_known_drift(samples):
    settings = SymbolicSettings(backend="pysr", population_size=50, generations=20, max_time_s=120)
    fit = fit_drift(samples, settings)
    assert fit.backend == "pysr"
    assert fit.value_error < 1e-3 * float(np.var(samples.value))
