"""Grid worlds whose level is an environment parameter, for LPG / GROOVE-style meta-learning.

The Learned Policy Gradient (Oh et al. 2020) and GROOVE (Jackson et al. 2023) meta-train an
update rule on *distributions of grid-world levels*. Making the level the gymnax `EnvParams`
(rather than a property of the environment object) means a level distribution is just a
distribution over params: one compiled program can `vmap` over a batch of levels, and a new
level never costs a recompile.

To keep every level the same shape, levels live on a fixed `MAX_SIZE x MAX_SIZE` canvas:
cell `row * MAX_SIZE + col` (the stride does not depend on the level's `size`), and the cells
with `row >= size` or `col >= size` are outside the level and behave as walls. Objects occupy
`MAX_OBJECTS` slots; a slot with type -1 holds no object. The agent collects an object by
stepping on it; it then may end the episode and may respawn later (see `GridWorld.step_env`).
Levels themselves (the LPG tabular levels, mazes, random distributions) are in `levels.py`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

MAX_SIZE = 13
MAX_CELLS = MAX_SIZE * MAX_SIZE
MAX_OBJECTS = 5
MAX_TYPES = 5
NUM_ACTIONS = 4  # up, right, down, left
OBS_SIZE = (1 + MAX_TYPES) * MAX_CELLS

# (row, col) change of each action: up, right, down, left.
ACTION_DELTAS = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], dtype=np.int32)


@struct.dataclass
class GridLevel:
    """One level: the env's `EnvParams`. Every field is an array, so levels stack and vmap.

    Attributes:
        walls: bool[MAX_CELLS], True where a wall stands (cells outside `size` are walls anyway).
        size: int32, the level is the top-left `size x size` square of the canvas.
        start: int32, the agent's cell at reset.
        object_cells: int32[MAX_OBJECTS], each object's (home) cell.
        object_types: int32[MAX_OBJECTS], each object's type, -1 for an empty slot.
        rewards: float32[MAX_TYPES], reward for collecting an object of each type.
        p_terminate: float32[MAX_TYPES], probability that collecting the type ends the episode.
        p_respawn: float32[MAX_TYPES], per-step probability that an absent object comes back.
        max_steps_in_episode: int32, the time limit (a truncation, in gymnax's convention).
        random_respawn: bool, False: an object respawns at its home cell (the tabular levels);
            True: at a uniformly random free cell.
    """

    walls: jax.Array
    size: jax.Array
    start: jax.Array
    object_cells: jax.Array
    object_types: jax.Array
    rewards: jax.Array
    p_terminate: jax.Array
    p_respawn: jax.Array
    max_steps_in_episode: jax.Array
    random_respawn: jax.Array


@struct.dataclass
class GridState:
    """The agent's cell, which objects are present and where, and the step count."""

    pos: jax.Array  # int32 cell
    present: jax.Array  # bool[MAX_OBJECTS]
    object_cells: jax.Array  # int32[MAX_OBJECTS], current cells
    time: jax.Array  # int32


def inside_mask(size: jax.Array) -> jax.Array:
    """Which canvas cells belong to a level of side `size`.

    Args:
        size: int32 scalar.

    Returns:
        bool[MAX_CELLS].
    """
    rows, cols = jnp.divmod(jnp.arange(MAX_CELLS), MAX_SIZE)
    return (rows < size) & (cols < size)


def free_mask(level: GridLevel) -> jax.Array:
    """Cells an agent or object may occupy: inside the level and not a wall.

    Args:
        level: the level.

    Returns:
        bool[MAX_CELLS].
    """
    return inside_mask(level.size) & ~level.walls


def move(level: GridLevel, pos: jax.Array, action: jax.Array) -> jax.Array:
    """The agent's cell after `action`: the neighbour, unless it is a wall or outside.

    Args:
        level: the level.
        pos: int32 cell.
        action: int in [0, NUM_ACTIONS): up, right, down, left.

    Returns:
        int32 cell.
    """
    row, col = jnp.divmod(pos, MAX_SIZE)
    delta = jnp.asarray(ACTION_DELTAS)[action]
    new_row, new_col = row + delta[0], col + delta[1]
    on_canvas = (new_row >= 0) & (new_row < MAX_SIZE) & (new_col >= 0) & (new_col < MAX_SIZE)
    target = jnp.clip(new_row, 0, MAX_SIZE - 1) * MAX_SIZE + jnp.clip(new_col, 0, MAX_SIZE - 1)
    allowed = on_canvas & free_mask(level)[target]
    return jnp.where(allowed, target, pos).astype(jnp.int32)


def _respawn(
    key: jax.Array,
    level: GridLevel,
    pos: jax.Array,
    present: jax.Array,
    cells: jax.Array,
    candidates: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Bring back each candidate object with probability p_respawn[type].

    At its home cell, or (random_respawn) at a uniformly random free cell that holds neither
    the agent nor a present object. Slots are placed one after another, so two objects
    respawning in the same step never share a cell; when no cell is left, none respawns.

    Args:
        key: PRNG key.
        level: the level.
        pos: the agent's cell.
        present: bool[MAX_OBJECTS] after this step's collection.
        cells: int32[MAX_OBJECTS] current object cells.
        candidates: bool[MAX_OBJECTS], the absent object slots that may respawn.

    Returns:
        (present, cells) after respawning.
    """
    key_coin, key_cells = jax.random.split(key)
    types = jnp.maximum(level.object_types, 0)
    coins = jax.random.uniform(key_coin, (MAX_OBJECTS,)) < level.p_respawn[types]
    respawns = candidates & coins

    free = free_mask(level)
    occupied = jnp.zeros(MAX_CELLS, bool).at[pos].set(True)
    occupied = occupied.at[cells].max(present)

    def place(occupied, inputs):
        slot_key, respawn, cell, home = inputs
        room = free & ~occupied
        has_room = room.any()
        random_cell = jax.random.choice(
            slot_key, MAX_CELLS, p=jnp.where(has_room, room, free).astype(jnp.float32)
        ).astype(jnp.int32)
        new_cell = jnp.where(level.random_respawn, random_cell, home)
        respawn = respawn & (has_room | ~level.random_respawn)
        occupied = occupied.at[new_cell].max(respawn)
        return occupied, (respawn, jnp.where(respawn, new_cell, cell))

    slot_keys = jax.random.split(key_cells, MAX_OBJECTS)
    homes = jnp.asarray(level.object_cells, jnp.int32)
    _, (respawned, new_cells) = jax.lax.scan(place, occupied, (slot_keys, respawns, cells, homes))
    return present | respawned, new_cells


class GridWorld(environment.Environment[GridState, GridLevel]):
    """A grid world that collects objects; its `EnvParams` are a `GridLevel`.

    `step` (gymnax's base class) auto-resets: when the episode terminated or the time limit
    was reached it returns the reset observation and state, with the last observation of the
    episode in `info["final_observation"]`.
    """

    def __init__(self, default_level: GridLevel | None = None):
        """Args:
        default_level: the level gymnax's calls without params use (levels.py builds levels
            on this module, so none is built here); metarl always passes the level.
        """
        super().__init__()
        self._default_level = default_level

    @property
    def default_params(self) -> GridLevel:
        if self._default_level is None:
            raise ValueError("a GridWorld's level is its params: pass one (levels.py)")
        return self._default_level

    def step_env(
        self,
        key: jax.Array,
        state: GridState,
        action: int | float | jax.Array,
        params: GridLevel,
    ) -> tuple[jax.Array, GridState, jax.Array, jax.Array, dict[Any, Any]]:
        """One transition: move, collect, maybe terminate, respawn, tick.

        The agent moves unless blocked. A present object on its new cell is collected: its
        type's reward, the object becomes absent, and the episode terminates with probability
        p_terminate[type]. Then each object that was already absent *before* this step
        respawns with probability p_respawn[type]; so a collected object is absent in at least
        the observation that follows its collection (with p_respawn = 1 it is back one step
        later). The time limit is gymnax's truncation (`is_truncated`), checked by `step`.

        Args:
            key: PRNG key.
            state: the current state.
            action: int in [0, NUM_ACTIONS).
            params: the level.

        Returns:
            (obs, state, reward, terminated, info), as gymnax's `step_env`.
        """
        key_terminate, key_respawn = jax.random.split(key)
        exists = params.object_types >= 0
        types = jnp.maximum(params.object_types, 0)
        was_absent = exists & ~state.present

        pos = move(params, state.pos, action)
        collected = exists & state.present & (state.object_cells == pos)
        reward = jnp.sum(jnp.where(collected, params.rewards[types], 0.0))
        ends = jax.random.uniform(key_terminate, (MAX_OBJECTS,)) < params.p_terminate[types]
        terminated = jnp.any(collected & ends)
        present = state.present & ~collected

        present, cells = _respawn(key_respawn, params, pos, present, state.object_cells, was_absent)
        state = GridState(pos=pos, present=present, object_cells=cells, time=state.time + 1)
        obs = self.get_obs(state, params)
        info = {"discount": jnp.where(terminated, 0.0, 1.0)}
        return (
            jax.lax.stop_gradient(obs),
            jax.lax.stop_gradient(state),
            reward.astype(jnp.float32),
            terminated,
            info,
        )

    def reset_env(self, key: jax.Array, params: GridLevel) -> tuple[jax.Array, GridState]:
        """The agent at `start`, every object present at its home cell, time 0.

        Args:
            key: PRNG key (unused: resets are deterministic given the level).
            params: the level.

        Returns:
            (obs, state).
        """
        del key
        state = GridState(
            pos=jnp.asarray(params.start, jnp.int32),
            present=params.object_types >= 0,
            object_cells=jnp.asarray(params.object_cells, jnp.int32),
            time=jnp.int32(0),
        )
        return self.get_obs(state, params), state

    def get_obs(self, state: GridState, params: GridLevel | None = None, key=None) -> jax.Array:
        """One-hot agent cell, then one map per object type of its present objects' cells.

        Args:
            state: the state.
            params: the level (its object types); None uses `default_params`.
            key: unused (gymnax's signature).

        Returns:
            float32[OBS_SIZE] = [(1 + MAX_TYPES) * MAX_CELLS].
        """
        if params is None:
            params = self.default_params
        shown = (params.object_types >= 0) & state.present
        maps = jnp.zeros((1 + MAX_TYPES, MAX_CELLS), jnp.float32)
        maps = maps.at[0, state.pos].set(1.0)
        rows = 1 + jnp.maximum(params.object_types, 0)
        maps = maps.at[rows, state.object_cells].max(shown.astype(jnp.float32))
        return maps.reshape(-1)

    @property
    def name(self) -> str:
        return "GridWorld"

    @property
    def num_actions(self) -> int:
        return NUM_ACTIONS

    def action_space(self, params: GridLevel | None = None) -> spaces.Discrete:
        """Up, right, down, left."""
        return spaces.Discrete(NUM_ACTIONS)

    def observation_space(self, params: GridLevel | None = None) -> spaces.Box:
        """The flat binary maps of `get_obs`."""
        return spaces.Box(0.0, 1.0, (OBS_SIZE,), dtype=jnp.float32)


def render_ascii(level: GridLevel, state: GridState | None = None) -> str:
    """A level (and optionally a state) as text, the format of the maps in levels.py.

    Only the level's `size x size` square is drawn: `#` wall, `.` empty, `0`-`4` an object of
    that type (present ones only when a state is given), `A` the agent (the start cell
    without a state), drawn over an object it stands on.

    Args:
        level: one (unbatched) level.
        state: a state of that level, or None to draw the level as reset.

    Returns:
        `size` lines of `size` characters joined by newlines.
    """
    size = int(level.size)
    walls = np.asarray(level.walls)
    grid = [["#" if walls[r * MAX_SIZE + c] else "." for c in range(size)] for r in range(size)]
    types = np.asarray(level.object_types)
    cells = np.asarray(level.object_cells if state is None else state.object_cells)
    present = types >= 0 if state is None else np.asarray(state.present) & (types >= 0)
    for cell, kind, shown in zip(cells, types, present):
        if shown:
            row, col = divmod(int(cell), MAX_SIZE)
            grid[row][col] = str(int(kind))
    row, col = divmod(int(level.start if state is None else state.pos), MAX_SIZE)
    grid[row][col] = "A"
    return "\n".join("".join(line) for line in grid)
