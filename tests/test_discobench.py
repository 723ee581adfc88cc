"""DiscoGen's MinAtar OnPolicyRL setting as the `discobench` suite and protocol: its config,
its 10 learning rates, and its score, a greedy evaluation of the final policy
(rl/discobench.py, ppo.greedy_returns)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_discogen import discogen_python, needs_runtime

from metarl.evaluation.protocols import PROTOCOLS
from metarl.evaluation.settings import CascadeSettings, plan_runs
from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.discobench import DISCOBENCH_GAMES, DISCOGEN_MINATAR_CONFIG
from metarl.rl.environments.registry import make_env
from metarl.rl.lr_sweep import parse_sweep
from metarl.rl.networks import ActorCritic
from metarl.rl.ppo import greedy_returns, make_train
from metarl.rl.suites import get_suite
from metarl.rl.training import run_training

TINY = default_config("CartPole-v1", total_timesteps=2048, num_log_points=4)
KEYS = jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])


# --- the greedy rollout ---------------------------------------------------------------------
def always(env_name: str, action: int) -> tuple[ActorCritic, dict]:
    """An actor whose logits are its last layer's bias alone, favouring `action`."""
    env = make_env(env_name)
    network = ActorCritic(num_actions=env.num_actions, hidden_size=8)
    params = network.init(jax.random.PRNGKey(7), jnp.zeros((env.obs_size,)))
    last = params["params"]["actor"]["Dense_2"]
    last["kernel"] = jnp.zeros_like(last["kernel"])
    last["bias"] = jnp.zeros_like(last["bias"]).at[action].set(5.0)
    return network, params


def fixed_action_returns(env_name: str, action: int, key, episodes: int, max_steps: int):
    """Each episode's return under a fixed action, stepped by gymnax in a Python loop from the
    reset keys `greedy_returns` documents, up to the first done or `max_steps`."""
    env, params = gymnax.make(env_name)
    key_reset, key_steps = jax.random.split(key)
    returns = []
    for reset_key in jax.random.split(key_reset, episodes):
        _, state = env.reset(reset_key, params)
        total = 0.0
        for step_key in jax.random.split(key_steps, max_steps):
            _, state, reward, terminated, truncated, _ = env.step(step_key, state, action, params)
            total += float(reward)
            if terminated or truncated:
                break
        returns.append(total)
    return returns


@pytest.mark.parametrize(("env_name", "action"), [("CartPole-v1", 1), ("Catch-bsuite", 0)])
def test_greedy_returns_equal_the_returns_of_always_playing_the_dominant_action(env_name, action):
    network, params = always(env_name, action)
    env, key = make_env(env_name), jax.random.PRNGKey(3)
    returns = greedy_returns(network, params, env, key, 4, env.max_steps)
    expected = fixed_action_returns(env_name, action, key, 4, env.max_steps)
    assert returns.shape == (4,)
    assert np.asarray(returns).tolist() == pytest.approx(expected, abs=1e-6)


def test_an_episode_still_running_after_max_steps_counts_its_return_so_far():
    network, params = always("CartPole-v1", 1)  # CartPole falls after ~10 steps, not 3
    env = make_env("CartPole-v1")
    returns = greedy_returns(network, params, env, jax.random.PRNGKey(0), 4, 3)
    assert np.asarray(returns).tolist() == [3.0] * 4


# --- the greedy return as the run's score ---------------------------------------------------
@pytest.fixture(scope="module")
def plain():
    """A tiny CartPole run on two seeds, scored as before (no greedy evaluation)."""
    return jax.jit(jax.vmap(make_train(TINY)))(KEYS)


@pytest.fixture(scope="module")
def greedy():
    """The same run with a greedy evaluation of 4 episodes."""
    return jax.jit(jax.vmap(make_train(TINY.replace(eval_episodes=4))))(KEYS)


def test_a_run_with_eval_episodes_scores_its_finite_greedy_return(greedy):
    assert greedy.greedy_return.shape == (2,)
    assert np.all(np.isfinite(greedy.greedy_return))
    assert np.array_equal(greedy.final_return, greedy.greedy_return)


def test_the_greedy_return_is_the_same_for_the_same_rng_and_is_what_every_layer_scores(greedy):
    run = run_training(TINY.replace(eval_episodes=4), Components(), [0, 1])
    assert run.final_returns == [float(x) for x in np.asarray(greedy.greedy_return)]


def test_the_evaluation_changes_no_training_number_and_without_it_nothing_changes(plain, greedy):
    assert plain.greedy_return is None  # the result's pytree is what it was before the field
    assert len(jax.tree.leaves(plain)) == 11
    for name in plain._fields:
        if name not in ("final_return", "greedy_return", "adaptation", "scratch"):
            assert np.array_equal(getattr(plain, name), getattr(greedy, name), equal_nan=True)
    # without eval_episodes the score is still the tail of training (not the greedy return)
    assert not np.array_equal(plain.final_return, greedy.final_return)
    again = jax.jit(jax.vmap(make_train(default_config(**TINY.to_dict()))))(KEYS)
    assert np.array_equal(plain.final_return, again.final_return)


def test_existing_config_hashes_are_unchanged():
    # recorded before eval_episodes existed: baselines and evaluation keys hang on them
    assert default_config("CartPole-v1").config_hash() == "aa88d10f8bffa85c"
    assert default_config("Breakout-MinAtar").config_hash() == "b8be1fe25d2162e5"
    assert "eval_episodes" not in default_config("CartPole-v1").to_dict()
    greedy = default_config("CartPole-v1", eval_episodes=16)
    assert greedy.to_dict()["eval_episodes"] == 16
    assert greedy.config_hash() != "aa88d10f8bffa85c"


# --- the suite and protocol carry DiscoGen's numbers ----------------------------------------
@pytest.mark.parametrize("env", sorted(DISCOBENCH_GAMES.values()))
def test_the_discobench_suite_trains_every_game_with_discogens_config(env):
    config = get_suite("discobench").config(env)
    assert config.to_dict() == {
        "env_name": env,
        "lr": 1e-3,
        "num_envs": 64,
        "num_steps": 128,
        "total_timesteps": 10_000_000,
        "update_epochs": 4,
        "num_minibatches": 8,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "clip_eps": 0.2,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "hidden_size": 64,
        "max_grad_norm": 0.5,
        "anneal_lr": True,
        "activation": "relu",
        "num_layers": 2,
        "adam_eps": 1e-5,
        "eval_episodes": 16,
        "num_log_points": 64,
    }


def test_the_discobench_suite_keeps_the_minatar_split_at_discogens_seeds():
    suite, minatar = get_suite("discobench"), get_suite("minatar")
    assert suite.roles() == minatar.roles()
    assert (suite.total_timesteps, suite.default_seeds) == (10_000_000, 8)
    assert "DiscoGen 1.3.0" in suite.description and "greedy" in suite.description


def test_the_discobench_protocol_sweeps_discogens_ten_rates_on_every_env():
    settings = PROTOCOLS["discobench"].settings
    rates = parse_sweep(settings["lr_sweep"], 1.0)
    assert rates == tuple(np.linspace(1e-3, 1e-2, 10))
    assert (settings["suite"], settings["seeds"], settings["lr_aggregation"]) == (
        "discobench",
        8,
        "best",
    )
    plan = plan_runs(
        CascadeSettings(
            suite="discobench", lr_sweep=settings["lr_sweep"], validation=True, heldout=True
        )
    )
    full = [run for run in plan if run.stage == "full"]
    assert {run.config.env_name for run in full} == set(get_suite("discobench").all_envs)
    for env in get_suite("discobench").all_envs:
        swept = [run for run in full if run.config.env_name == env]
        assert tuple(run.config.lr for run in swept) == rates
        assert all(run.sweep == rates and run.config.eval_episodes == 16 for run in swept)


# --- against an installed DiscoGen -----------------------------------------------------------
def discogen_minatar_configs(python: str) -> dict[str, dict]:
    """Game -> the config dict of DiscoGen's installed `datasets/MinAtar/<Game>/config.py`."""
    where = subprocess.run(
        [python, "-c", "import discogen, os; print(os.path.dirname(discogen.__file__))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    folder = Path(where) / "domains" / "OnPolicyRL" / "datasets" / "MinAtar"
    configs = {}
    for path in sorted(folder.glob("*/config.py")):
        (statement,) = ast.parse(path.read_text()).body
        assert isinstance(statement, ast.Assign) and statement.targets[0].id == "config"
        configs[path.parent.name] = ast.literal_eval(statement.value)
    return configs


@pytest.mark.harness
@needs_runtime
def test_our_constants_are_the_configs_of_the_installed_discogen():
    configs = discogen_minatar_configs(discogen_python())
    assert set(configs) == set(DISCOBENCH_GAMES)
    for game, config in configs.items():
        assert config == DISCOGEN_MINATAR_CONFIG, game
