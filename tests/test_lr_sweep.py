"""Learning-rate sweeps: one program vmapped over learning rates x seeds (rl/training.py), and
the grid, parsing and aggregation of rl/lr_sweep.py.

What the extra vmapped axis must not change: a rate's numbers. The traced learning rate
changes no bit (a sweep's rows equal a plain program's over the same number of rows); against
a separate run over the seeds alone, the weights differ by float rounding only (XLA rounds a
batch of L x S rows differently from one of S), and on these 4-update runs the returns and
curves agree exactly, for PPO and for the optimizer task's update rule, whose progress is read
off the (now traced) learning rate.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.lr_sweep import SweepScore, choose_lr, log_grid, parse_sweep, sweep_score
from metarl.rl.training import BatchProgram, run_sweep, run_training, sweep_rows
from metarl.tasks import get_task
from metarl.tasks.candidate import load_function

CONFIG = default_config("CartPole-v1", total_timesteps=4 * 128 * 4)  # 4 updates
SEEDS = [0, 1]
LEARNING_RATES = (1e-4, 2.5e-4, 3e-3)


def same_run(swept, separate):
    """The numbers of two EnvRuns agree exactly (the timings, of course, do not)."""
    assert swept.env == separate.env and swept.seeds == separate.seeds
    assert swept.total_timesteps == separate.total_timesteps
    assert swept.final_returns == separate.final_returns
    assert swept.curve_steps == separate.curve_steps
    assert swept.curve == separate.curve and swept.curve_std == separate.curve_std
    assert swept.nonfinite_update == separate.nonfinite_update
    assert swept.min_drift == separate.min_drift


@pytest.fixture(scope="module")
def separate():
    """PPO trained at each rate on its own: the reference a sweep must reproduce."""
    return [run_training(CONFIG.replace(lr=lr), Components(), SEEDS) for lr in LEARNING_RATES]


@pytest.fixture(scope="module")
def swept():
    return run_sweep(CONFIG, Components(), SEEDS, LEARNING_RATES)


@pytest.fixture(scope="module")
def program():
    """A one-candidate BatchProgram (PPO itself) sweeping LEARNING_RATES."""
    return BatchProgram(CONFIG, lambda i: Components(), 1, SEEDS, learning_rates=LEARNING_RATES)


# -- the vmapped learning-rate axis ---------------------------------------------------------------
def test_rows_pair_every_learning_rate_with_every_seed():
    keys, lrs = sweep_rows([3, 5], [1e-4, 1e-3, 1e-2])
    assert keys.shape[0] == lrs.shape[0] == 6
    assert lrs.tolist() == pytest.approx([1e-4, 1e-4, 1e-3, 1e-3, 1e-2, 1e-2])
    seed_keys = [jax.random.PRNGKey(3), jax.random.PRNGKey(5)]
    for row in range(6):
        np.testing.assert_array_equal(keys[row], seed_keys[row % 2])


def test_each_swept_rate_trains_exactly_as_a_separate_run_at_that_rate(swept, separate):
    assert len(swept) == len(LEARNING_RATES)
    for run, alone in zip(swept, separate):
        same_run(run, alone)
    # the rates do train differently: the comparison is not of one run with itself
    assert len({tuple(run.final_returns) for run in swept}) == len(LEARNING_RATES)


def test_a_swept_run_is_labelled_with_its_rate_and_its_configs_hash(swept):
    for lr, run in zip(LEARNING_RATES, swept):
        assert run.extra["lr"] == lr
        assert run.extra["config_hash"] == CONFIG.replace(lr=lr).config_hash()
    assert len({run.extra["config_hash"] for run in swept}) == len(LEARNING_RATES)


def test_a_batch_program_sweep_equals_the_separate_runs_per_rate_and_per_seed(program, separate):
    runner, runs = program.advance_sweep(program.start(0), 0, CONFIG.num_updates)
    for run, alone in zip(runs, separate):
        same_run(run, alone)
    _, per_seed = program.advance_sweep_per_seed(program.start(0), 0, CONFIG.num_updates)
    assert len(per_seed) == len(LEARNING_RATES)
    for lr, runs_of_lr, alone in zip(LEARNING_RATES, per_seed, separate):
        assert [run.seeds for run in runs_of_lr] == [[s] for s in SEEDS]
        assert [run.final_returns[0] for run in runs_of_lr] == alone.final_returns
        assert all(run.extra["lr"] == lr for run in runs_of_lr)


def trained_params(program, rows=slice(None)):
    runner, _ = program.advance(program.start(0), 0, CONFIG.num_updates)
    return [np.asarray(leaf)[rows] for leaf in jax.tree.leaves(runner.params)]


@pytest.fixture(scope="module")
def swept_params(program):
    runner, _ = program.advance_sweep(program.start(0), 0, CONFIG.num_updates)
    return [np.asarray(leaf) for leaf in jax.tree.leaves(runner.params)]


HIGH = len(LEARNING_RATES) - 1  # the rate whose weights the next two tests compare
HIGH_ROWS = slice(HIGH * len(SEEDS), (HIGH + 1) * len(SEEDS))  # row r: rate r // S, seed r % S


def test_the_traced_rate_changes_no_bit_of_training_on_the_same_rows(swept_params):
    """A plain program at the rate, vmapped over as many rows as the sweep (the seeds once per
    rate), trains the rate's rows to exactly the sweep's weights."""
    config = CONFIG.replace(lr=LEARNING_RATES[HIGH])
    plain = BatchProgram(config, lambda i: Components(), 1, SEEDS * len(LEARNING_RATES))
    for alone, swept in zip(trained_params(plain, HIGH_ROWS), swept_params):
        np.testing.assert_array_equal(alone, swept[HIGH_ROWS])


def test_a_swept_rates_weights_match_the_plain_program_at_that_rate_to_rounding(
    program, swept_params
):
    """Against a plain program over the S seeds alone the weights agree to float rounding, not
    bit for bit: XLA's CPU kernels round differently for a batch of L x S rows than of S
    (a few float32 ulps after 4 updates; the returns above still agree exactly)."""
    plain = BatchProgram(CONFIG.replace(lr=LEARNING_RATES[HIGH]), lambda i: Components(), 1, SEEDS)
    for alone, swept in zip(trained_params(plain), swept_params):
        np.testing.assert_allclose(alone, swept[HIGH_ROWS], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="advance_sweep"):
        plain.advance_sweep(plain.start(0), 0, 1)
    with pytest.raises(ValueError, match="sweeps learning rates"):
        program.advance(program.start(0), 0, 1)


def test_a_sweep_in_two_segments_equals_the_sweep_in_one(program, swept):
    half = CONFIG.num_updates // 2
    runner, _ = program.advance_sweep(program.start(0), 0, half)
    _, rest = program.advance_sweep(runner, 0, CONFIG.num_updates)
    for run, whole in zip(rest, swept):
        assert run.curve == whole.curve


def test_the_optimizer_tasks_rule_sweeps_exactly_as_separate_runs():
    """The rule optimizer reads its progress off lr / lr0, both traced in a sweep."""
    task = get_task("optimizer")
    rule = load_function(task.baseline_program().source, task.function_name)
    rates = (3e-4, 3e-3)
    runs = run_sweep(CONFIG, task.plug(rule), SEEDS, rates)
    for lr, run in zip(rates, runs):
        same_run(run, run_training(CONFIG.replace(lr=lr), task.plug(rule), SEEDS))


def test_a_sweep_rejects_an_empty_or_non_positive_grid():
    with pytest.raises(ValueError, match="at least one"):
        run_sweep(CONFIG, Components(), SEEDS, [])
    with pytest.raises(ValueError, match="positive"):
        BatchProgram(CONFIG, lambda i: Components(), 1, SEEDS, learning_rates=[1e-3, 0.0])


# -- aggregation ----------------------------------------------------------------------------------
def test_best_lr_and_mean_over_lrs_aggregate_the_separately_computed_scores(swept, separate):
    score = sweep_score(LEARNING_RATES, [run.mean for run in swept])
    means = [run.mean for run in separate]
    assert score.best == max(means)
    assert score.best_lr == LEARNING_RATES[int(np.argmax(means))]
    assert score.mean == pytest.approx(np.mean(means), rel=1e-12)
    assert score.per_lr == tuple(means) and score.learning_rates == LEARNING_RATES


def test_an_undefined_score_never_wins_and_leaves_the_mean_undefined():
    score = sweep_score([1e-4, 1e-3, 1e-2], [0.5, None, math.nan])
    assert score == SweepScore(
        per_lr=(0.5, None, None),
        learning_rates=(1e-4, 1e-3, 1e-2),
        best=0.5,
        best_lr=1e-4,
        mean=None,
    )
    nothing = sweep_score([1e-3], [None])
    assert nothing.best is None and nothing.best_lr is None and nothing.mean is None


def test_sweep_score_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="2 learning rates but 3 scores"):
        sweep_score([1e-4, 1e-3], [1.0, 2.0, 3.0])


def test_choose_lr_picks_the_best_selection_score():
    assert choose_lr([1e-4, 1e-3, 1e-2], [0.2, 0.1, 0.7]) == 1e-2
    assert choose_lr([1e-4, 1e-3, 1e-2], [None, math.nan, -3.0]) == 1e-2


def test_choose_lr_breaks_ties_toward_the_grids_center_in_log_space():
    grid = log_grid(1e-3, 5)
    assert choose_lr(grid, [1.0, 0.0, 1.0, 0.0, 1.0]) == grid[2] == 1e-3
    assert choose_lr(grid, [1.0, 1.0, 0.0, 0.0, 1.0]) == grid[1]
    # the two middle rates of an even grid are equally close: the smaller wins
    even = log_grid(1e-3, 4)
    assert choose_lr(even, [0.0, 1.0, 1.0, 0.0]) == even[1]
    assert choose_lr(even, [1.0, 0.0, 0.0, 1.0]) == even[0]


def test_choose_lr_needs_a_defined_score():
    with pytest.raises(ValueError, match="no learning rate has a defined"):
        choose_lr([1e-4, 1e-3], [None, math.inf])


# -- the grid and its parsing ---------------------------------------------------------------------
def test_log_grid_spans_the_factor_geometrically_around_its_center():
    assert log_grid(2.5e-4, 1) == (2.5e-4,)
    low, mid, high = log_grid(1e-3, 3)
    assert mid == 1e-3
    assert low == pytest.approx(1e-3 / math.sqrt(10)) and high == pytest.approx(
        1e-3 * math.sqrt(10)
    )
    grid = log_grid(1e-3, 5, span=100.0)
    assert grid[2] == 1e-3 and grid[0] == pytest.approx(1e-4) and grid[-1] == pytest.approx(1e-2)
    assert np.allclose(np.diff(np.log(grid)), math.log(100.0) / 4)
    even = log_grid(1e-3, 4)
    assert 1e-3 not in even and math.sqrt(even[0] * even[-1]) == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "center, count, span, message",
    [
        (1e-3, 0, 10.0, "count >= 1"),
        (1e-3, 2.0, 10.0, "count >= 1"),
        (0.0, 3, 10.0, "center > 0"),
        (-1e-3, 3, 10.0, "center > 0"),
        (math.nan, 3, 10.0, "center > 0"),
        (1e-3, 3, 1.0, "span > 1"),
    ],
)
def test_log_grid_rejects_bad_arguments(center, count, span, message):
    with pytest.raises(ValueError, match=message):
        log_grid(center, count, span)


def test_parse_sweep_reads_a_count_as_a_grid_and_a_list_as_sorted_rates():
    assert parse_sweep("3", 2.5e-4) == log_grid(2.5e-4, 3)
    assert parse_sweep(" 5 ", 1e-3) == log_grid(1e-3, 5)
    assert parse_sweep("1e-3,1e-4,3e-4", 1.0) == (1e-4, 3e-4, 1e-3)
    assert parse_sweep("1e-3, 3e-4", 1.0) == (3e-4, 1e-3)
    assert parse_sweep("3e-4", 1.0) == (3e-4,)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("0", "count >= 1"),
        ("1e-4,abc", "bad learning rate 'abc'"),
        ("1e-4,,1e-3", "bad learning rate ''"),
        ("1e-4,-1e-3", "finite and > 0"),
        ("1e-4,inf", "finite and > 0"),
        ("1e-4,1e-4", "twice"),
    ],
)
def test_parse_sweep_errors_are_one_line_value_errors(text, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_sweep(text, 1e-3)
    assert "\n" not in str(error.value)
