"""The PPO trainer: the drift form is PPO, runs are reproducible, NaN is caught, GAE is right."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metarl.rl.components import Components, ppo_clip_drift
from metarl.rl.configs import default_config
from metarl.rl.ppo import Transition, compute_gae, make_train
from metarl.rl.training import run_training
from metarl.tasks import get_task, task_names
from metarl.tasks.candidate import load_function

TINY = default_config("CartPole-v1", total_timesteps=4096, num_log_points=4)


def clipped_surrogate_loss(ratio, advantage, epsilon):
    """PPO's objective written directly, as in the paper."""
    clipped = jnp.clip(ratio, 1 - epsilon, 1 + epsilon)
    return -jnp.mean(jnp.minimum(ratio * advantage, clipped * advantage))


def drift_form_loss(drift, ratio, advantage, epsilon):
    return -jnp.mean(ratio * advantage - drift(ratio, advantage, epsilon))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_drift_form_equals_clipped_surrogate_in_value_and_gradient(seed):
    key_logp, key_adv = jax.random.split(jax.random.PRNGKey(seed))
    log_ratio = 0.4 * jax.random.normal(key_logp, (4096,))  # ratios well outside the clip range
    advantage = jax.random.normal(key_adv, (4096,))
    seed_drift = load_function(get_task("drift").seed_program("ppo_clip").source, "drift")

    def via_drift(lr):
        return drift_form_loss(seed_drift, jnp.exp(lr), advantage, 0.2)

    def direct(lr):
        return clipped_surrogate_loss(jnp.exp(lr), advantage, 0.2)

    assert jnp.allclose(via_drift(log_ratio), direct(log_ratio), rtol=1e-6, atol=1e-7)
    grad_drift, grad_direct = jax.grad(via_drift)(log_ratio), jax.grad(direct)(log_ratio)
    assert jnp.allclose(grad_drift, grad_direct, rtol=1e-5, atol=1e-8)
    # the comparison is not vacuous: some samples are clipped, so their gradient is zero
    assert int(jnp.sum(grad_direct == 0.0)) > 100
    assert int(jnp.sum(grad_direct != 0.0)) > 100


def test_ppo_clip_seed_file_is_the_trainer_default():
    ratio = jnp.linspace(0.3, 2.5, 101)
    advantage = jnp.linspace(-2.0, 2.0, 101)
    seed_drift = load_function(get_task("drift").seed_program("ppo_clip").source, "drift")
    assert jnp.array_equal(seed_drift(ratio, advantage, 0.2), ppo_clip_drift(ratio, advantage, 0.2))


@pytest.fixture(scope="module")
def reference_run():
    keys = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    return jax.jit(jax.vmap(make_train(TINY)))(keys)


def test_result_shapes_and_finiteness(reference_run):
    out = reference_run
    for field in ("steps", "episode_return", "episodes", "actor_loss", "value_loss", "entropy"):
        assert getattr(out, field).shape == (2, 4), field
    assert np.all(np.asarray(out.first_nonfinite_update) == -1)
    assert np.all(np.isfinite(np.asarray(out.actor_loss)))
    assert np.all(np.asarray(out.episodes) > 0)
    # the curve's x axis ends at the real budget: 8 updates of 4 envs x 128 steps
    assert int(out.steps[0, -1]) == TINY.num_updates * TINY.batch_size == 4096
    # a policy that is barely trained still has entropy near log(2) on CartPole
    assert 0.5 < float(out.entropy[0, 0]) <= float(np.log(2)) + 1e-4


def test_same_seed_same_returns_different_seed_different(reference_run):
    again = jax.jit(jax.vmap(make_train(TINY)))(
        jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    )
    np.testing.assert_array_equal(
        np.asarray(again.actor_loss), np.asarray(reference_run.actor_loss)
    )
    np.testing.assert_array_equal(
        np.asarray(again.episode_return), np.asarray(reference_run.episode_return)
    )
    assert not np.array_equal(
        np.asarray(reference_run.actor_loss[0]), np.asarray(reference_run.actor_loss[1])
    )


@pytest.mark.parametrize(
    "task_name,seed_name", [(name, get_task(name).baseline_name) for name in task_names()]
)
def test_baseline_seeds_reproduce_ppo_with_adam_exactly(reference_run, task_name, seed_name):
    task = get_task(task_name)
    components = task.plug(load_function(task.seed_program(seed_name).source, task.function_name))
    out = jax.jit(jax.vmap(make_train(TINY, components)))(
        jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    )
    np.testing.assert_array_equal(np.asarray(out.actor_loss), np.asarray(reference_run.actor_loss))
    np.testing.assert_array_equal(
        np.asarray(out.episode_return), np.asarray(reference_run.episode_return)
    )


def test_nan_in_the_objective_is_reported_with_its_update():
    def explosive_drift(ratio, advantage, epsilon):
        # finite at the first minibatch (ratio == 1), NaN once the policy has moved
        return jnp.where(jnp.abs(ratio - 1.0) > 1e-6, jnp.nan, 0.0)

    run = run_training(TINY, Components(drift=explosive_drift), seeds=[0])
    assert not run.finite
    assert run.nonfinite_update == 0  # the first update already produced NaN parameters
    assert run.nonfinite_seed_index == 0


def test_gae_bootstraps_truncated_steps_but_not_terminal_ones():
    # three steps, one env: step 0 is truncated, step 1 terminates, step 2 continues
    ones = jnp.ones((3, 1))
    traj = Transition(
        obs=jnp.zeros((3, 1, 4)),
        action=jnp.zeros((3, 1), jnp.int32),
        log_prob=jnp.zeros((3, 1)),
        value=jnp.array([[1.0], [2.0], [3.0]]),
        reward=ones,
        done=jnp.array([[1.0], [1.0], [0.0]]),
        truncated=jnp.array([[1.0], [0.0], [0.0]]),
        final_obs=jnp.zeros((3, 1, 4)),
    )
    final_value = jnp.array([[10.0], [20.0], [30.0]])
    last_value = jnp.array([4.0])
    gamma, lam = 0.9, 0.5
    advantages, targets = compute_gae(traj, final_value, last_value, gamma, lam)
    # step 2: ordinary TD error to the next state's value
    assert advantages[2, 0] == pytest.approx(1.0 + gamma * 4.0 - 3.0)
    # step 1: terminal, nothing after it counts
    assert advantages[1, 0] == pytest.approx(1.0 - 2.0)
    # step 0: truncated, bootstrapped from V(final_obs)=10, and the next episode does not leak in
    assert advantages[0, 0] == pytest.approx(1.0 + gamma * 10.0 - 1.0)
    np.testing.assert_allclose(targets, advantages + traj.value)


def test_curve_is_downsampled_to_a_fixed_number_of_points():
    config = TINY.replace(total_timesteps=40 * 512, num_log_points=6)  # 40 updates -> 6 points
    out = jax.jit(make_train(config))(jax.random.PRNGKey(0))
    assert out.steps.shape == (6,)
    # every update is logged: 40 updates in buckets of 7,7,6,7,7,6; the last ends training
    assert [int(s) // 512 for s in out.steps] == [7, 14, 20, 27, 34, 40]
    assert int(np.asarray(out.episodes).sum()) > 0


def test_final_return_falls_back_to_the_last_finished_episodes_when_the_tail_has_none():
    # MountainCar's random-ish policy never reaches the flag: every episode lasts exactly 200
    # steps. 20 updates of 16 steps: the last 10% (steps 288-320 of each env) ends no episode.
    config = default_config(
        "MountainCar-v0", total_timesteps=20 * 16 * 4, num_steps=16, num_log_points=20
    )
    run = run_training(config, Components(), seeds=[0])
    assert run.final_returns == [-200.0]
    assert run.curve[-1] is None  # no episode ended in the last logged bucket


def test_final_return_is_the_mean_over_the_last_tenth_of_training(reference_run):
    out = reference_run  # 8 updates: the tail is the last update, which is the last bucket's 2nd
    assert np.all(np.isfinite(np.asarray(out.final_return)))
    assert np.all(np.asarray(out.final_return) > 8.0)  # CartPole pays 1 per step, >= 9 steps
