"""metarl's Seaquest is gymnax's game: the per-cell collision equals gymnax's pairwise one on
adversarial buffers, and whole rollouts match gymnax's step for step, bit for bit."""

from __future__ import annotations

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.minatar import seaquest as gymnax_seaquest
from gymnax.environments.minatar import seaquest_helpers

from metarl.rl.environments import seaquest
from metarl.rl.environments.registry import make_env

ROWS = seaquest_helpers.MAX_ENTITIES


def _buffer(rng, columns: int, low: int, high: int) -> np.ndarray:
    return rng.integers(low, high + 1, size=(ROWS, columns)).astype(np.int32)


def _crowded(columns: int, cell: tuple[int, int]) -> np.ndarray:
    """Every row on one cell: the case where gymnax's first-target and last-bullet rules
    decide everything."""
    rows = np.zeros((ROWS, columns), np.int32)
    rows[:, 0], rows[:, 1] = cell
    rows[:, 2:] = np.arange(ROWS)[:, None] % 2
    return rows


def _cases():
    rng = np.random.default_rng(20261130)
    cases = [
        (_crowded(3, (4, 4)), 100, _crowded(5, (4, 4)), 100),  # all on one cell, all live
        (_crowded(3, (4, 4)), 7, _crowded(5, (4, 4)), 3),  # dead rows share the live cell
        (_crowded(3, (-1, 10)), 50, _crowded(5, (-1, 10)), 60),  # the state space's corner
        (_crowded(3, (0, 0)), 0, _crowded(5, (0, 0)), 100),  # no bullets
        (_crowded(3, (9, 9)), 100, _crowded(5, (9, 9)), 0),  # no targets
    ]
    for low, high in [(0, 9), (-1, 10), (3, 4), (0, 1)]:  # board, state space, crowded
        for _ in range(40):
            bullets, targets = _buffer(rng, 3, low, high), _buffer(rng, 5, low, high)
            counts = rng.integers(0, ROWS + 1, size=2)
            cases.append((bullets, int(counts[0]), targets, int(counts[1])))
    return cases


def test_the_per_cell_collision_equals_gymnaxs_on_adversarial_buffers():
    theirs, ours = jax.jit(seaquest_helpers.collide_bullets), jax.jit(seaquest.collide_per_cell)
    hits = 0
    for bullets, bullet_count, targets, target_count in _cases():
        args = (bullets, jnp.int32(bullet_count), targets, jnp.int32(target_count))
        expected, got = theirs(*args), ours(*args)
        for want, have in zip(expected, got):
            assert want.dtype == have.dtype
            np.testing.assert_array_equal(np.asarray(want), np.asarray(have))
        hits += int(expected[4])
    assert hits > 500  # the cases collide, many times


@jax.jit
def _rollouts(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """gymnax's Seaquest and metarl's, 32 envs x 1500 steps on the same keys and actions
    (fire-heavy random play, so bullets meet fish and subs): the first step at which any
    output differed (-1: none), and each game's total reward."""
    theirs, ours = gymnax_seaquest.MinSeaquest(), seaquest.Seaquest()
    params = theirs.default_params
    envs = 32
    reset_keys = jax.random.split(key, envs)
    _, state = jax.vmap(theirs.reset, (0, None))(reset_keys, params)
    _, same_state = jax.vmap(ours.reset, (0, None))(reset_keys, params)

    def step(carry, t):
        state_a, state_b, key, first_difference, reward_a, reward_b = carry
        key, action_key, fire_key, step_key = jax.random.split(key, 4)
        action = jax.random.randint(action_key, (envs,), 0, theirs.num_actions)
        action = jnp.where(jax.random.bernoulli(fire_key, 0.5, (envs,)), 5, action)  # fire
        step_keys = jax.random.split(step_key, envs)
        out_a = jax.vmap(theirs.step, (0, 0, 0, None))(step_keys, state_a, action, params)
        out_b = jax.vmap(ours.step, (0, 0, 0, None))(step_keys, state_b, action, params)
        leaves_a = jax.tree.leaves(out_a[:4])
        leaves_b = jax.tree.leaves(out_b[:4])
        same = jnp.all(jnp.array([jnp.array_equal(a, b) for a, b in zip(leaves_a, leaves_b)]))
        first_difference = jnp.where((first_difference < 0) & ~same, t, first_difference)
        carry = (
            out_a[1],
            out_b[1],
            key,
            first_difference,
            reward_a + jnp.sum(out_a[2]),
            reward_b + jnp.sum(out_b[2]),
        )
        return carry, None

    start = (state, same_state, key, jnp.int32(-1), jnp.float32(0), jnp.float32(0))
    (_, _, _, first_difference, reward_a, reward_b), _ = jax.lax.scan(step, start, jnp.arange(1500))
    return first_difference, reward_a, reward_b


def test_rollouts_match_gymnaxs_seaquest_step_for_step():
    first_difference, theirs, ours = _rollouts(jax.random.key(7))
    assert int(first_difference) == -1
    assert float(theirs) == float(ours) > 20  # bullets hit things along the way


def test_every_method_that_collides_is_rebound_and_gymnax_is_left_as_shipped():
    callers = seaquest._methods_calling(gymnax_seaquest.MinSeaquest, "collide_bullets")
    assert set(callers) == {"_step_friendly_bullets", "_step_enemy_subs", "_step_enemy_fish"}
    for name in callers:
        mine = vars(seaquest.Seaquest)[name]
        assert mine.__globals__["collide_bullets"] is seaquest.collide_per_cell
        assert mine.__code__ is callers[name].__code__  # gymnax's own code
    assert gymnax_seaquest.collide_bullets is seaquest_helpers.collide_bullets
    env, _ = gymnax.make("Seaquest-MinAtar")
    assert type(env) is gymnax_seaquest.MinSeaquest


@pytest.mark.parametrize("name", ["Seaquest-MinAtar", "Breakout-MinAtar"])
def test_the_trainer_steps_metarls_seaquest_and_gymnaxs_other_games(name):
    env = make_env(name).env
    assert (type(env) is seaquest.Seaquest) == (name == "Seaquest-MinAtar")
    assert env.name == name
