"""GridWorld dynamics, the LPG tabular levels, mazes, random level distributions, and the
grid levels' place among metarl's environments (names, FlatDiscreteEnv, PPO)."""

from __future__ import annotations

from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metarl.rl.configs import default_config
from metarl.rl.environments import levels
from metarl.rl.environments.gridworld import (
    MAX_CELLS,
    MAX_OBJECTS,
    MAX_SIZE,
    MAX_TYPES,
    OBS_SIZE,
    GridLevel,
    GridState,
    GridWorld,
    render_ascii,
)
from metarl.rl.environments.registry import UnknownEnvironment, make_env
from metarl.rl.ppo import make_train

UP, RIGHT, DOWN, LEFT = range(4)
ENV = GridWorld()
STEP = jax.jit(ENV.step)
STEP_ENV = jax.jit(ENV.step_env)


def cell(row: int, col: int) -> int:
    return row * MAX_SIZE + col


def make_level(layout: str, rewards, p_terminate, p_respawn, max_steps=100, random_respawn=False):
    """A hand-written level for the dynamics tests."""
    parsed = levels.parse_layout(layout)

    def padded(values):
        return jnp.asarray(list(values) + [0.0] * (MAX_TYPES - len(values)), jnp.float32)

    return GridLevel(
        walls=jnp.asarray(parsed.walls),
        size=jnp.int32(parsed.size),
        start=jnp.int32(parsed.start),
        object_cells=jnp.asarray(parsed.object_cells),
        object_types=jnp.asarray(parsed.object_types),
        rewards=padded(rewards),
        p_terminate=padded(p_terminate),
        p_respawn=padded(p_respawn),
        max_steps_in_episode=jnp.int32(max_steps),
        random_respawn=jnp.bool_(random_respawn),
    )


def walk(level, actions, seed=0):
    """Step through `actions` with step_env (no auto-reset); the states and rewards."""
    _, state = ENV.reset(jax.random.PRNGKey(seed), level)
    states, rewards, terminals = [state], [], []
    for i, action in enumerate(actions):
        key = jax.random.PRNGKey(1000 * seed + i)
        _, state, reward, terminated, _ = STEP_ENV(key, state, jnp.int32(action), level)
        states.append(state)
        rewards.append(float(reward))
        terminals.append(bool(terminated))
    return states, rewards, terminals


def free_cells(level) -> set[int]:
    size = int(level.size)
    walls = np.asarray(level.walls)
    return {cell(r, c) for r in range(size) for c in range(size) if not walls[cell(r, c)]}


def component(free: set[int], start: int) -> set[int]:
    """The free cells a breadth-first search from `start` reaches."""
    seen, queue = {start}, deque([start])
    while queue:
        row, col = divmod(queue.popleft(), MAX_SIZE)
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            r, c = row + dr, col + dc
            if 0 <= r < MAX_SIZE and 0 <= c < MAX_SIZE and cell(r, c) in free - seen:
                seen.add(cell(r, c))
                queue.append(cell(r, c))
    return seen


def connected(free: set[int]) -> bool:
    return component(free, min(free)) == free


def assert_valid(level) -> None:
    """Start and objects on distinct free cells inside the level; used slots first."""
    free = free_cells(level)
    types = np.asarray(level.object_types)
    count = int((types >= 0).sum())
    assert count >= 1 and (types[:count] >= 0).all() and (types[count:] == -1).all()
    objects = [int(c) for c in np.asarray(level.object_cells)[:count]]
    assert int(level.start) in free
    assert set(objects) <= free
    assert len({int(level.start), *objects}) == 1 + count


def trees_equal(a, b) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )


# -- tabular levels ------------------------------------------------------------------------

TABULAR_FACTS = {
    # name: size, max_steps, object types, rewards, p_terminate, p_respawn
    "dense": (11, 500, [0, 0, 1, 2], [1, -1, -1], [0, 0.5, 0], [0.05, 0.1, 0.5]),
    "sparse": (13, 50, [0, 1], [1, -1], [1, 1], [0, 0]),
    "long": (11, 1000, [0, 0, 1, 1], [1, -1], [0, 0.5], [0.01, 1.0]),
    "longer": (9, 2000, [0, 0, 1, 1, 1], [1, -1], [0.1, 0.8], [0.01, 1.0]),
    "long_dense": (11, 2000, [0, 0, 0, 0], [1], [0], [0.005]),
}


@pytest.mark.parametrize("name", list(TABULAR_FACTS))
def test_tabular_level_has_the_lpg_size_objects_rewards_and_probabilities(name):
    size, max_steps, types, rewards, p_terminate, p_respawn = TABULAR_FACTS[name]
    level = levels.level_from_name(f"Grid-{name}")

    def padded(values):
        return np.asarray(list(values) + [0] * (MAX_TYPES - len(values)), np.float32)

    assert int(level.size) == size
    assert int(level.max_steps_in_episode) == max_steps
    assert list(np.asarray(level.object_types)) == types + [-1] * (MAX_OBJECTS - len(types))
    np.testing.assert_array_equal(level.rewards, padded(rewards))
    np.testing.assert_array_equal(level.p_terminate, padded(p_terminate))
    np.testing.assert_array_equal(level.p_respawn, padded(p_respawn))
    assert not bool(level.random_respawn)
    assert_valid(level)


def test_tabular_names_are_the_five_lpg_levels():
    assert levels.TABULAR == (
        "Grid-dense",
        "Grid-sparse",
        "Grid-long",
        "Grid-longer",
        "Grid-long_dense",
    )


@pytest.mark.parametrize("name", ["dense", "sparse", "long"])
def test_open_tabular_levels_have_no_walls(name):
    assert not np.asarray(levels.tabular_level(name).walls).any()


def test_longer_has_a_centre_wall_with_gaps_at_rows_1_and_7():
    walls = {c for c in range(MAX_CELLS) if levels.tabular_level("longer").walls[c]}
    assert walls == {cell(r, 4) for r in range(9) if r not in (1, 7)}


def test_long_dense_has_four_rooms_joined_by_four_gaps():
    walls = {c for c in range(MAX_CELLS) if levels.tabular_level("long_dense").walls[c]}
    column = {cell(r, 5) for r in range(11) if r not in (0, 7)}
    row = {cell(4, c) for c in range(11) if c not in (2, 8)}
    assert walls == column | row and len(walls) == 17


@pytest.mark.parametrize("name", list(levels.TABULAR_LEVELS))
def test_render_ascii_draws_a_tabular_level_as_its_map(name):
    level = levels.tabular_level(name)
    expected = "\n".join(line.strip() for line in levels.TABULAR_LEVELS[name].layout.split())
    assert render_ascii(level) == expected


# -- dynamics ------------------------------------------------------------------------------

LINE = """
    A0.
    ...
    ...
"""


def test_collecting_an_object_gives_its_reward_and_makes_it_absent():
    level = make_level(LINE, rewards=[0.5], p_terminate=[0.0], p_respawn=[0.0])
    states, rewards, terminals = walk(level, [RIGHT])
    assert rewards == [0.5] and terminals == [False]
    assert not bool(states[1].present[0]) and int(states[1].pos) == cell(0, 1)
    obs = ENV.get_obs(states[1], level).reshape(1 + MAX_TYPES, MAX_CELLS)
    assert obs[0, cell(0, 1)] == 1 and obs[0].sum() == 1 and obs[1:].sum() == 0


def test_an_object_with_p_respawn_zero_never_comes_back():
    level = make_level(LINE, rewards=[1.0], p_terminate=[0.0], p_respawn=[0.0])
    states, rewards, _ = walk(level, [RIGHT] + [LEFT, RIGHT] * 10)
    assert sum(rewards) == 1.0
    assert not any(bool(s.present[0]) for s in states[1:])


def test_an_object_with_p_respawn_one_is_back_at_its_cell_the_next_step():
    level = make_level(LINE, rewards=[1.0], p_terminate=[0.0], p_respawn=[1.0])
    states, rewards, _ = walk(level, [RIGHT, DOWN, UP])
    assert not bool(states[1].present[0])
    assert bool(states[2].present[0]) and int(states[2].object_cells[0]) == cell(0, 1)
    assert rewards == [1.0, 0.0, 1.0]


def test_collecting_an_object_with_p_terminate_one_ends_the_episode_and_resets():
    level = make_level(LINE, rewards=[-0.25], p_terminate=[1.0], p_respawn=[0.0])
    _, state = ENV.reset(jax.random.PRNGKey(0), level)
    obs, state, reward, terminated, truncated, info = STEP(
        jax.random.PRNGKey(1), state, jnp.int32(RIGHT), level
    )
    assert float(reward) == -0.25 and bool(terminated) and not bool(truncated)
    assert int(state.pos) == cell(0, 0) and bool(state.present[0]) and int(state.time) == 0
    final = info["final_observation"].reshape(1 + MAX_TYPES, MAX_CELLS)
    assert final[0, cell(0, 1)] == 1 and final[1:].sum() == 0
    np.testing.assert_array_equal(obs, ENV.reset(jax.random.PRNGKey(2), level)[0])


def test_p_terminate_zero_never_ends_the_episode():
    level = make_level(LINE, rewards=[1.0], p_terminate=[0.0], p_respawn=[1.0])
    _, _, terminals = walk(level, [RIGHT, LEFT] * 10)
    assert not any(terminals)


def test_walls_and_the_level_border_block_moves():
    level = make_level(
        """
        A#.
        ...
        ...
        """,
        rewards=[],
        p_terminate=[],
        p_respawn=[],
    )
    states, _, _ = walk(level, [UP, LEFT, RIGHT, DOWN, RIGHT, RIGHT, RIGHT, DOWN, DOWN])
    positions = [int(s.pos) for s in states]
    # up, left: the canvas edge; right: the wall; then along row 1 to the level's right border
    # (col 3 is on the canvas but outside the 3x3 level), then down to its bottom border.
    assert positions == [cell(0, 0)] * 4 + [
        cell(1, 0),
        cell(1, 1),
        cell(1, 2),
        cell(1, 2),
        cell(2, 2),
        cell(2, 2),
    ]


def test_the_time_limit_truncates_without_terminating():
    level = make_level(LINE, rewards=[], p_terminate=[], p_respawn=[], max_steps=3)
    _, state = ENV.reset(jax.random.PRNGKey(0), level)
    flags = []
    for i in range(3):
        _, state, _, terminated, truncated, _ = STEP(
            jax.random.PRNGKey(i), state, jnp.int32(DOWN), level
        )
        flags.append((bool(terminated), bool(truncated)))
    assert flags == [(False, False), (False, False), (False, True)]
    assert int(state.time) == 0 and int(state.pos) == cell(0, 0)  # auto-reset


def test_random_respawn_puts_objects_on_free_cells_away_from_agent_and_objects():
    level = make_level(
        """
        A0#
        .1.
        ...
        """,
        rewards=[1.0, 0.0],
        p_terminate=[0.0, 0.0],
        p_respawn=[1.0, 0.0],
        random_respawn=True,
    )
    _, state = ENV.reset(jax.random.PRNGKey(0), level)
    _, state, _, _, _ = STEP_ENV(jax.random.PRNGKey(0), state, jnp.int32(RIGHT), level)
    allowed = free_cells(level) - {cell(0, 1), cell(1, 1)}  # the agent, object 1
    keys = jax.random.split(jax.random.PRNGKey(1), 64)
    respawned = jax.vmap(lambda k: STEP_ENV(k, state, jnp.int32(UP), level)[1])(keys)
    assert np.asarray(respawned.present[:, 0]).all()
    cells = {int(c) for c in np.asarray(respawned.object_cells[:, 0])}
    assert cells <= allowed and len(cells) > 1


def test_observation_is_the_agent_one_hot_then_one_map_per_object_type():
    level = levels.tabular_level("dense")
    obs, state = ENV.reset(jax.random.PRNGKey(0), level)
    maps = np.asarray(obs).reshape(1 + MAX_TYPES, MAX_CELLS)
    assert obs.shape == (OBS_SIZE,) == ENV.observation_space(level).shape
    assert obs.dtype == jnp.float32 and ENV.action_space(level).n == 4
    assert np.flatnonzero(maps[0]).tolist() == [int(level.start)]
    for kind in range(MAX_TYPES):
        cells = np.asarray(level.object_cells)[np.asarray(level.object_types) == kind]
        assert sorted(np.flatnonzero(maps[1 + kind]).tolist()) == sorted(cells.tolist())
    assert isinstance(state, GridState)


def test_one_program_steps_a_batch_of_different_levels():
    keys = jax.random.split(jax.random.PRNGKey(0), 8)
    batch = jax.vmap(levels.sample_level, in_axes=(0, None))(keys, levels.ALL)
    obs, state = jax.vmap(ENV.reset)(keys, batch)
    actions = jnp.arange(8, dtype=jnp.int32) % 4
    out = jax.jit(jax.vmap(ENV.step))(keys, state, actions, batch)
    assert obs.shape == out[0].shape == (8, OBS_SIZE)
    np.testing.assert_array_equal(state.pos, batch.start)


# -- sampled levels and mazes --------------------------------------------------------------

SAMPLE = jax.jit(levels.sample_level, static_argnums=1)


@pytest.mark.parametrize("distribution", [levels.SMALL, levels.MEDIUM, levels.ALL])
def test_a_level_sampled_twice_from_one_key_is_identical(distribution):
    key = jax.random.PRNGKey(7)
    assert trees_equal(SAMPLE(key, distribution), SAMPLE(key, distribution))
    assert not trees_equal(SAMPLE(key, distribution), SAMPLE(jax.random.PRNGKey(8), distribution))


@pytest.mark.parametrize("distribution", [levels.SMALL, levels.MEDIUM, levels.ALL])
def test_every_vmapped_sampled_level_is_valid_and_within_its_distribution(distribution):
    keys = jax.random.split(jax.random.PRNGKey(0), 64)
    batch = jax.jit(jax.vmap(levels.sample_level, in_axes=(0, None)), static_argnums=1)(
        keys, distribution
    )
    sizes = set()
    for i in range(len(keys)):
        level = jax.tree.map(lambda x, i=i: x[i], batch)
        assert_valid(level)
        size = int(level.size)
        sizes.add(size)
        assert distribution.size[0] <= size <= distribution.size[1]
        types = np.asarray(level.object_types)
        count = int((types >= 0).sum())
        assert distribution.objects[0] <= count <= distribution.objects[1]
        assert types[:count].tolist() == [i % distribution.num_types for i in range(count)]
        assert np.asarray(level.walls).sum() <= distribution.num_walls
        assert 0 <= float(level.rewards[0]) <= 1
        assert np.all(np.abs(level.rewards) <= 1)
        used = np.arange(MAX_TYPES) < distribution.num_types
        assert np.all((1e-2 <= level.p_terminate[used]) & (level.p_terminate[used] <= 1))
        assert np.all((1e-3 <= level.p_respawn[used]) & (level.p_respawn[used] <= 1e-1))
        assert np.all(np.asarray(level.rewards)[~used] == 0)
        low, high = distribution.max_steps
        assert low <= int(level.max_steps_in_episode) <= high
    assert sizes == set(range(distribution.size[0], distribution.size[1] + 1))
    assert trees_equal(jax.tree.map(lambda x: x[3], batch), SAMPLE(keys[3], distribution))


def test_sampled_objects_are_reachable_from_the_start():
    keys = jax.random.split(jax.random.PRNGKey(1), 32)
    for key in keys:
        level = SAMPLE(key, levels.ALL)
        reachable = component(free_cells(level), int(level.start))
        used = np.asarray(level.object_types) >= 0
        assert {int(c) for c in np.asarray(level.object_cells)[used]} <= reachable


@pytest.mark.parametrize("maze", list(levels.MAZES))
def test_maze_free_cells_are_connected(maze):
    level = levels.maze_level(jax.random.PRNGKey(0), maze)
    assert int(level.size) == 13 and np.asarray(level.walls).any()
    assert connected(free_cells(level))


@pytest.mark.parametrize("name", list(levels.TABULAR_LEVELS))
def test_tabular_free_cells_are_connected(name):
    assert connected(free_cells(levels.tabular_level(name)))


@pytest.mark.parametrize("maze", list(levels.MAZES))
def test_maze_levels_draw_start_objects_and_dynamics_from_the_key(maze):
    draw = jax.jit(levels.maze_level, static_argnums=1)
    level = draw(jax.random.PRNGKey(3), maze)
    assert trees_equal(level, draw(jax.random.PRNGKey(3), maze))
    assert not trees_equal(level, draw(jax.random.PRNGKey(4), maze))
    assert_valid(level)
    assert np.asarray(level.object_types).tolist() == [0, 1, 2, -1, -1]
    assert np.all((0 <= level.rewards[:3]) & (level.rewards[:3] <= 1))
    assert np.all((1e-2 <= level.p_terminate[:3]) & (level.p_terminate[:3] <= 1))
    assert np.all((1e-3 <= level.p_respawn[:3]) & (level.p_respawn[:3] <= 1e-1))
    assert 25 <= int(level.max_steps_in_episode) <= 50 and not bool(level.random_respawn)


# -- names ---------------------------------------------------------------------------------


def test_level_names_draw_from_prng_key_of_the_level_seed():
    assert levels.level_name("small", 17) == "Grid-small:level=17"
    assert levels.level_name("Grid-maze_rooms", 3) == "Grid-maze_rooms:level=3"
    small = levels.level_from_name("Grid-small:level=17")
    assert trees_equal(small, SAMPLE(jax.random.PRNGKey(17), levels.SMALL))
    maze = levels.level_from_name("Grid-maze_spiral")  # seed 0 by default
    draw = jax.jit(levels.maze_level, static_argnums=1)
    assert trees_equal(maze, draw(jax.random.PRNGKey(0), "spiral"))
    limited = levels.level_from_name("Grid-dense:max_steps_in_episode=20")
    assert int(limited.max_steps_in_episode) == 20


@pytest.mark.parametrize(
    "name",
    ["Grid-nope", "Grid-dense:level=1", "Grid-small:level=0.5", "Grid-all:size=4"],
)
def test_bad_grid_names_raise_unknown_environment(name):
    with pytest.raises(UnknownEnvironment):
        levels.level_from_name(name)
    with pytest.raises(UnknownEnvironment):
        make_env(name)


def test_is_grid_tells_grid_levels_from_gymnax_envs():
    assert levels.is_grid("Grid-dense") and levels.is_grid("Grid-all:level=2")
    assert not levels.is_grid("CartPole-v1") and not levels.is_grid("FourRooms-misc")


# -- through metarl's environment interface and PPO ----------------------------------------


@pytest.mark.parametrize("name", ["Grid-dense", "Grid-small:level=5"])
def test_make_env_resets_and_steps_a_grid_level(name):
    env = make_env(name)
    assert env.obs_size == OBS_SIZE and env.num_actions == 4
    assert env.max_steps == int(levels.level_from_name(name).max_steps_in_episode)
    obs, state = env.reset(jax.random.PRNGKey(0))
    step = jax.jit(env.step)(jax.random.PRNGKey(1), state, jnp.int32(RIGHT))
    assert obs.shape == step.obs.shape == step.final_obs.shape == (OBS_SIZE,)
    assert step.reward.dtype == jnp.float32


def test_ppo_trains_on_grid_dense_with_its_default_config():
    config = default_config("Grid-dense", total_timesteps=4 * 128 * 2, num_log_points=2)
    result = jax.jit(make_train(config))(jax.random.PRNGKey(0))
    assert int(result.first_nonfinite_update) == -1
    assert np.isfinite(float(result.final_return))
