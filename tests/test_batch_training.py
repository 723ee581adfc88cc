"""One compiled program trains a batch of candidates (rl/training.py's BatchProgram).

What batching must not change: a candidate's numbers. They equal PPO's own for the seed
programs, they do not depend on which candidates share the batch or where the candidate sits in
it, and a run in two segments (the short run, then the rest) equals the run in one.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.training import BatchProgram, run_training
from metarl.rl.verifier import artifact
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


def compiled(task, functions):
    return BatchProgram(
        CONFIG, lambda i: task.select(functions, i), size=len(functions), seeds=SEEDS
    )


def train(program, index, stops=(None,)):
    """Candidate `index` of `program` from its start, stopped at each of `stops` in turn."""
    runner = program.start(index)
    runs = []
    for stop in stops:
        runner, run = program.advance(runner, index, stop or CONFIG.num_updates)
        runs.append(run)
    return runs


def train_in_batch(task, functions, index, stops=(None,)):
    return train(compiled(task, functions), index, stops)


# Compiling a program takes most of a test's time, so the tests share two: PPO itself, and one
# drift batch of a steep candidate, the drift seeds and a broken candidate. Every test starts its
# own runs on them; a run never depends on the runs before it (each is its own call).
STEEP_AT, BASELINE_AT, BROKEN_AT = 0, 2, 3


@pytest.fixture(scope="module")
def ppo():
    return run_training(CONFIG, Components(), SEEDS)


@pytest.fixture(scope="module")
def mixed():
    """steep, lpo, the baseline (ppo_clip), broken: one compiled program."""
    lpo = DRIFT.seed_program("lpo").source
    functions = [STEEP, lpo, None, BROKEN]
    return compiled(DRIFT, [assembled(DRIFT, source) for source in functions])


@pytest.mark.parametrize("task", [DRIFT, OPTIMIZER], ids=lambda t: t.name)
def test_the_baseline_program_reproduces_ppo_bit_for_bit_inside_a_batch(task, ppo, request):
    if task is DRIFT:  # the shared drift batch: the seeds, a steep and a broken candidate
        program, index = request.getfixturevalue("mixed"), BASELINE_AT
    else:
        others = [assembled(task, s.source) for s in task.seed_programs() if not s.is_baseline]
        program, index = compiled(task, [*others, assembled(task)]), len(others)
    (run,) = train(program, index)
    assert run.final_returns == ppo.final_returns
    assert run.curve == ppo.curve


def test_a_candidates_scores_do_not_depend_on_its_batch_mates_or_position(mixed):
    steep = assembled(DRIFT, STEEP)
    (alone,) = train_in_batch(DRIFT, [steep], index=0)
    (first,) = train(mixed, STEEP_AT)  # with the seeds and a broken candidate after it
    (last,) = train_in_batch(DRIFT, [assembled(DRIFT, BROKEN), assembled(DRIFT), steep], 2)
    assert alone.final_returns == first.final_returns == last.final_returns
    assert alone.curve == first.curve == last.curve
    assert alone.nonfinite_update is None


def test_a_nan_stays_with_its_candidate(mixed):
    (broken,) = train(mixed, BROKEN_AT)
    (honest,) = train(mixed, BASELINE_AT)
    assert broken.nonfinite_update == 0
    assert honest.nonfinite_update is None and np.isfinite(honest.final_returns).all()


def test_a_run_in_two_segments_equals_the_run_in_one(mixed):
    half = CONFIG.num_updates // 2
    short, rest = train(mixed, BASELINE_AT, stops=(half, None))
    (whole,) = train(mixed, BASELINE_AT)
    assert rest.final_returns == whole.final_returns
    assert rest.curve == whole.curve
    # the short segment is summarised on its own: its steps, its curve so far
    assert short.total_timesteps == half * CONFIG.batch_size
    assert short.curve_steps[-1] <= short.total_timesteps
    assert short.curve == whole.curve[: len(short.curve)]


def test_the_program_is_compiled_once_whatever_the_batch_size(mixed):
    assert mixed.size == 4 and mixed.compile_s > 0
    for index in (STEEP_AT, BASELINE_AT):  # (the broken candidate's mean is NaN)
        runner = mixed.start(index)
        _, run = mixed.advance(runner, index, CONFIG.num_updates)
        assert run.compile_s == 0.0 and jnp.isfinite(run.mean)
