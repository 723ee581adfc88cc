"""One compiled program trains a batch of candidates (rl/training.py's BatchProgram).

What batching must not change: a candidate's numbers. They equal PPO's own for the seed
programs, they do not depend on which candidates share the batch or where the candidate sits in
it, and a run in two segments (the short run, then the rest) equals the run in one.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from metarl.rl import artifact
from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.training import BatchProgram, run_training
from metarl.tasks import get_task
from metarl.tasks.candidate import load_function

DRIFT = get_task("drift")
OPTIMIZER = get_task("optimizer")
CONFIG = default_config("CartPole-v1", total_timesteps=4096)
SEEDS = [0, 1]

STEEP = """
def drift(ratio, advantage, epsilon):
    return 3.0 * jnp.square(ratio - 1.0)
"""
BROKEN = """
def drift(ratio, advantage, epsilon):
    return jnp.square(ratio - 1.0) / (ratio - ratio)
"""


def assembled(task, source=None):
    """The candidate as the trainer sees it: exported per element, verified, reassembled."""
    function = load_function(source or task.baseline_program().source, task.function_name)
    blobs = artifact.export_variants(task.per_element(function), task.element_signature, "cpu")
    return task.assemble(artifact.load_variants(blobs, task.element_signature, "cpu"))


def train_in_batch(task, functions, index, stops=(None,)):
    program = BatchProgram(
        CONFIG, lambda i: task.select(functions, i), size=len(functions), seeds=SEEDS
    )
    runner = program.start(index)
    runs = []
    for stop in stops:
        runner, run = program.advance(runner, index, stop or CONFIG.num_updates)
        runs.append(run)
    return runs


@pytest.mark.parametrize("task", [DRIFT, OPTIMIZER], ids=lambda t: t.name)
def test_the_baseline_program_reproduces_ppo_bit_for_bit_inside_a_batch(task):
    reference = run_training(CONFIG, Components(), SEEDS)
    others = [assembled(task, s.source) for s in task.seed_programs() if not s.is_baseline]
    (run,) = train_in_batch(task, [*others, assembled(task)], index=len(others))
    assert run.final_returns == reference.final_returns
    assert run.curve == reference.curve


def test_a_candidates_scores_do_not_depend_on_its_batch_mates_or_position():
    steep = assembled(DRIFT, STEEP)
    (alone,) = train_in_batch(DRIFT, [steep], index=0)
    (first,) = train_in_batch(DRIFT, [steep, assembled(DRIFT), assembled(DRIFT, BROKEN)], 0)
    (last,) = train_in_batch(DRIFT, [assembled(DRIFT, BROKEN), assembled(DRIFT), steep], 2)
    assert alone.final_returns == first.final_returns == last.final_returns
    assert alone.curve == first.curve == last.curve
    assert alone.nonfinite_update is None


def test_a_nan_stays_with_its_candidate():
    functions = [assembled(DRIFT, BROKEN), assembled(DRIFT)]
    (broken,) = train_in_batch(DRIFT, functions, 0)
    (honest,) = train_in_batch(DRIFT, functions, 1)
    assert broken.nonfinite_update == 0
    assert honest.nonfinite_update is None and np.isfinite(honest.final_returns).all()


def test_a_run_in_two_segments_equals_the_run_in_one():
    functions = [assembled(DRIFT)]
    half = CONFIG.num_updates // 2
    short, rest = train_in_batch(DRIFT, functions, 0, stops=(half, None))
    (whole,) = train_in_batch(DRIFT, functions, 0)
    assert rest.final_returns == whole.final_returns
    assert rest.curve == whole.curve
    # the short segment is summarised on its own: its steps, its curve so far
    assert short.total_timesteps == half * CONFIG.batch_size
    assert short.curve_steps[-1] <= short.total_timesteps
    assert short.curve == whole.curve[: len(short.curve)]


def test_the_program_is_compiled_once_whatever_the_batch_size():
    functions = [assembled(DRIFT, STEEP), assembled(DRIFT)]
    program = BatchProgram(CONFIG, lambda i: DRIFT.select(functions, i), 2, SEEDS)
    assert program.compile_s > 0
    for index in (0, 1):
        runner = program.start(index)
        _, run = program.advance(runner, index, CONFIG.num_updates)
        assert run.compile_s == 0.0 and jnp.isfinite(run.mean)
