"""The Learned Policy Gradient (rl/lpg/network.py, rl/lpg/agent.py): what the network reads,
what its targets do to an agent, and how a candidate network is read without being executed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metarl.rl.environments.gridworld import GridWorld
from metarl.rl.environments.levels import level_from_name
from metarl.rl.lpg.agent import (
    AgentConfig,
    AgentParams,
    Rollout,
    a2c_loss,
    agent_networks,
    gae,
    lifetime_from_seed,
    lpg_loss,
    make_lpg_train,
)
from metarl.rl.lpg.network import (
    LPGInputs,
    LPGShape,
    LPGTargets,
    encode_lpg_weights,
    init_lpg,
    lpg_source,
    lpg_targets,
    read_lpg_source,
)

SHAPE = LPGShape(embedding_width=4, gru_width=8, target_width=3)


def rollout(key, steps=6, batch=3, obs=5, actions=4, dones=()) -> Rollout:
    k1, k2, k3, k4 = jax.random.split(key, 4)
    done = jnp.zeros((steps, batch), bool)
    for t in dones:
        done = done.at[t].set(True)
    return Rollout(
        obs=jax.random.normal(k1, (steps, batch, obs)),
        action=jax.random.randint(k2, (steps, batch), 0, actions),
        reward=jax.random.normal(k3, (steps, batch)),
        done=done,
        next_obs=jax.random.normal(k4, (steps, batch, obs)),
    )


def inputs(key, steps=6, batch=3, dones=()) -> LPGInputs:
    k1, k2, k3, k4 = jax.random.split(key, 4)
    done = jnp.zeros((steps, batch), bool)
    for t in dones:
        done = done.at[t].set(True)
    y = jax.nn.softmax(jax.random.normal(k3, (steps, batch, SHAPE.target_width)))
    return LPGInputs(
        reward=jax.random.normal(k1, (steps, batch)),
        done=done,
        pi=jax.random.uniform(k2, (steps, batch)),
        y=y,
        y_next=jax.nn.softmax(jax.random.normal(k4, (steps, batch, SHAPE.target_width))),
    )


def test_lpg_targets_have_the_rollouts_shape_and_y_hat_is_a_distribution():
    params = init_lpg(jax.random.PRNGKey(0), SHAPE)
    targets = lpg_targets(params, SHAPE, inputs(jax.random.PRNGKey(1)))
    assert targets.pi_hat.shape == (6, 3)
    assert targets.y_hat.shape == (6, 3, SHAPE.target_width)
    np.testing.assert_allclose(targets.y_hat.sum(-1), 1.0, rtol=1e-6)


def test_a_step_target_reads_only_its_own_and_later_steps_of_its_episode():
    """The network runs backwards and is reset at episode ends: changing the reward at step 4
    changes the targets of steps 2..4 (same episode, at or before it), not of step 5 (later)
    nor of steps 0..1 (an episode that ended at step 1)."""
    params = init_lpg(jax.random.PRNGKey(0), SHAPE)
    base = inputs(jax.random.PRNGKey(1), dones=(1,))
    changed = base._replace(reward=base.reward.at[4].add(3.0))
    a = lpg_targets(params, SHAPE, base).pi_hat
    b = lpg_targets(params, SHAPE, changed).pi_hat
    differs = np.abs(np.asarray(a - b)).max(axis=1) > 0
    assert differs.tolist() == [False, False, True, True, True, False]


def test_lifetime_conditioning_reads_progress_only_in_ta_lpg():
    key = jax.random.PRNGKey(2)
    plain = init_lpg(key, SHAPE)
    x = inputs(jax.random.PRNGKey(3))
    early = lpg_targets(plain, SHAPE, x, progress=0.1, lifetime=100.0).pi_hat
    late = lpg_targets(plain, SHAPE, x, progress=0.9, lifetime=100.0).pi_hat
    np.testing.assert_array_equal(early, late)
    ta = SHAPE._replace(lifetime_conditioning=True)
    params = init_lpg(key, ta)
    early = lpg_targets(params, ta, x, progress=0.1, lifetime=100.0).pi_hat
    late = lpg_targets(params, ta, x, progress=0.9, lifetime=100.0).pi_hat
    assert not np.allclose(early, late)


def test_lpg_with_advantage_and_identity_targets_is_the_actor_critic_update():
    """pi_hat = the actor-critic's GAE advantages and y_hat = y(s) (an identity target
    network): the policy gradient is exactly actor-critic's (without its entropy bonus) and
    the prediction gets no gradient at all."""
    config = AgentConfig(hidden=(16,), entropy_coef=0.0)
    actor, y_net = agent_networks(config, 4, SHAPE.target_width)
    _, critic = agent_networks(config, 4, 1)
    batch = rollout(jax.random.PRNGKey(4), dones=(2,))
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(5), 3)
    actor_params = actor.init(k1, batch.obs[0, 0])
    lpg_agent = AgentParams(actor_params, y_net.init(k2, batch.obs[0, 0]))
    ac_agent = AgentParams(actor_params, critic.init(k3, batch.obs[0, 0]))

    value = critic.apply(ac_agent.critic, batch.obs)[..., 0]
    next_value = critic.apply(ac_agent.critic, batch.next_obs)[..., 0]
    advantages = gae(batch.reward, value, next_value, batch.done, config)
    y = jax.nn.softmax(y_net.apply(lpg_agent.critic, batch.obs))
    targets = LPGTargets(pi_hat=advantages, y_hat=y)

    lpg_grads = jax.grad(lpg_loss)(lpg_agent, actor, y_net, batch, targets, 0.5)
    ac_grads, _ = jax.grad(a2c_loss, has_aux=True)(ac_agent, actor, critic, batch, config)
    for a, b in zip(jax.tree.leaves(lpg_grads.actor), jax.tree.leaves(ac_grads.actor)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    for leaf in jax.tree.leaves(lpg_grads.critic):
        np.testing.assert_allclose(leaf, 0.0, atol=1e-6)


def test_updates_after_the_lifetime_change_nothing():
    """The scan runs `max_updates`, the agent learns for `lifetime`: a longer scan with the
    same lifetime trains the same agent to the same final return, bit for bit."""
    env = GridWorld()
    level = level_from_name("Grid-small:level=3")
    params = init_lpg(jax.random.PRNGKey(0), SHAPE)
    results = []
    for max_updates in (6, 10):
        config = AgentConfig(num_envs=2, rollout_len=5, max_updates=max_updates, eval_steps=40)
        train = jax.jit(make_lpg_train(config, SHAPE, env))
        results.append(float(train(jax.random.PRNGKey(7), params, level, 6).final_return))
    assert results[0] == results[1]


def test_a_levels_lifetime_is_fixed_by_its_seed_and_within_the_range():
    lifetimes = [lifetime_from_seed(seed, (10, 250)) for seed in range(50)]
    assert lifetimes == [lifetime_from_seed(seed, (10, 250)) for seed in range(50)]
    assert min(lifetimes) >= 10 and max(lifetimes) <= 250
    assert len(set(lifetimes)) > 10
    assert lifetime_from_seed(3, (40, 40)) == 40


def test_an_lpg_candidate_is_read_back_exactly():
    params = init_lpg(jax.random.PRNGKey(0), SHAPE)
    shape, read = read_lpg_source(lpg_source(params, SHAPE, "a title"))
    assert shape == SHAPE
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(read)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "source, reason",
    [
        ("import os\nos.system('touch /tmp/pwned')", "assigns LPG_SHAPE"),
        ("LPG_SHAPE = {}\nLPG_WEIGHTS = __import__('os').getcwd()", "not a literal"),
        ("LPG_SHAPE = {'gru_width': 1000000000}\nLPG_WEIGHTS = ''", "must be an int"),
        ("LPG_SHAPE = {'evil': 1}\nLPG_WEIGHTS = ''", "unknown fields"),
        ("LPG_SHAPE = {}\nLPG_WEIGHTS = 'not base64!'", "not base64"),
        ("def f(:\n", "not Python"),
    ],
)
def test_a_hostile_or_broken_candidate_is_refused_without_running_it(source, reason, tmp_path):
    with pytest.raises(ValueError, match=reason):
        read_lpg_source(source)


def test_weights_for_another_shape_or_non_finite_are_refused():
    params = init_lpg(jax.random.PRNGKey(0), SHAPE)
    other = SHAPE._replace(gru_width=9)
    with pytest.raises(ValueError, match="has shape"):
        read_lpg_source(
            f"LPG_SHAPE = {dict(other._asdict())!r}\nLPG_WEIGHTS = {encode_lpg_weights(params)!r}"
        )
    nan = jax.tree.map(lambda x: x * jnp.nan, params)
    with pytest.raises(ValueError, match="non-finite"):
        read_lpg_source(lpg_source(nan, SHAPE, "nan"))
