"""Grid-world levels: the LPG tabular levels, mazes, and random level distributions.

A level is a `GridLevel` (the `GridWorld` env params), so each family here is a function to
params: a fixed level (`tabular_level`), or a pure function of a PRNG key (`maze_level`,
`sample_level`) that is jittable and vmappable over keys, so a batch of levels is one array
program and a level is reproducible from its key alone.

- Tabular levels: the five of the Learned Policy Gradient paper (Oh et al. 2020), with the
  paper's sizes, object types, rewards and probabilities; the layouts are our own maps.
- Mazes: fixed 13x13 corridors whose start, objects and dynamics are drawn from a key.
- Random distributions (`SMALL`, `MEDIUM`, `ALL`): size, walls, objects and dynamics all drawn.

Levels have names, `Grid-<level>` with a key seed as the variant `:level=N` where the level is
drawn (`Grid-small:level=17`), so suites and the CLI refer to them like gymnax environments.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from metarl.rl.environments.gridworld import (
    MAX_CELLS,
    MAX_OBJECTS,
    MAX_SIZE,
    MAX_TYPES,
    GridLevel,
    inside_mask,
)
from metarl.rl.environments.names import UnknownEnvironment, split_variant

GRID_PREFIX = "Grid-"
SEED_FIELD = "level"

# ----------------------------------------------------------------------------------------
# Maps: `#` wall, `.` empty, `A` start, a digit an object of that type.


class Layout(NamedTuple):
    """A parsed map, on the MAX_SIZE canvas. Object slots are ordered by type, then by
    reading order; unused slots have type -1 and cell 0; `start` is -1 when the map has none."""

    size: int
    walls: np.ndarray  # bool[MAX_CELLS]
    start: int
    object_cells: np.ndarray  # int32[MAX_OBJECTS]
    object_types: np.ndarray  # int32[MAX_OBJECTS]


def parse_layout(text: str) -> Layout:
    """Parse a square ASCII map.

    Args:
        text: lines of equal length (surrounding blank lines and indentation ignored).

    Returns:
        The Layout.

    Raises:
        ValueError: not square, too large, unknown characters, too many objects or starts.
    """
    rows = [line.strip() for line in text.strip().splitlines()]
    size = len(rows)
    if size > MAX_SIZE or any(len(row) != size for row in rows):
        raise ValueError(f"a map must be square and at most {MAX_SIZE} wide: {rows}")
    walls = np.zeros(MAX_CELLS, bool)
    starts, objects = [], []
    for r, row in enumerate(rows):
        for c, char in enumerate(row):
            cell = r * MAX_SIZE + c
            if char == "#":
                walls[cell] = True
            elif char == "A":
                starts.append(cell)
            elif char.isdigit() and int(char) < MAX_TYPES:
                objects.append((int(char), cell))
            elif char != ".":
                raise ValueError(f"unknown map character {char!r}")
    if len(starts) > 1 or len(objects) > MAX_OBJECTS:
        raise ValueError(f"a map has at most one start and {MAX_OBJECTS} objects")
    objects.sort()  # by type, then reading order
    types = np.full(MAX_OBJECTS, -1, np.int32)
    cells = np.zeros(MAX_OBJECTS, np.int32)
    for slot, (kind, cell) in enumerate(objects):
        types[slot], cells[slot] = kind, cell
    return Layout(size, walls, starts[0] if starts else -1, cells, types)


def _padded(values: tuple[float, ...]) -> jax.Array:
    return jnp.asarray(list(values) + [0.0] * (MAX_TYPES - len(values)), jnp.float32)


# ----------------------------------------------------------------------------------------
# Tabular levels (LPG, Oh et al. 2020).


class TabularSpec(NamedTuple):
    """A fixed level: its map and per-type dynamics (types beyond the tuples are unused)."""

    layout: str
    rewards: tuple[float, ...]
    p_terminate: tuple[float, ...]
    p_respawn: tuple[float, ...]
    max_steps: int


TABULAR_LEVELS: dict[str, TabularSpec] = {
    "dense": TabularSpec(
        layout="""
            ...........
            .0.......0.
            ...........
            ...........
            ...........
            .....A.....
            ...........
            ...........
            ...........
            .1.......2.
            ...........
        """,
        rewards=(1.0, -1.0, -1.0),
        p_terminate=(0.0, 0.5, 0.0),
        p_respawn=(0.05, 0.1, 0.5),
        max_steps=500,
    ),
    "sparse": TabularSpec(
        layout="""
            .............
            ..........0..
            .............
            .............
            .............
            .............
            ......A......
            .............
            .............
            .............
            .............
            ..1..........
            .............
        """,
        rewards=(1.0, -1.0),
        p_terminate=(1.0, 1.0),
        p_respawn=(0.0, 0.0),
        max_steps=50,
    ),
    "long": TabularSpec(
        layout="""
            A..........
            ...........
            ..1.....0..
            ...........
            ...........
            ...........
            ...........
            ...........
            ..0.....1..
            ...........
            ...........
        """,
        rewards=(1.0, -1.0),
        p_terminate=(0.0, 0.5),
        p_respawn=(0.01, 1.0),
        max_steps=1000,
    ),
    "longer": TabularSpec(  # a wall down column 4, gaps at rows 1 and 7
        layout="""
            ....#....
            A........
            ....#..1.
            .1..#....
            ....#...0
            ....#.1..
            ....#....
            .........
            0...#....
        """,
        rewards=(1.0, -1.0),
        p_terminate=(0.1, 0.8),
        p_respawn=(0.01, 1.0),
        max_steps=2000,
    ),
    "long_dense": TabularSpec(  # four rooms: column 5 (gaps rows 0, 7), row 4 (gaps cols 2, 8)
        layout="""
            ...........
            .....#..0..
            .A...#.....
            ...0.#.....
            ##.#####.##
            .....#.....
            .....#.....
            ...........
            .0...#.....
            .....#...0.
            .....#.....
        """,
        rewards=(1.0,),
        p_terminate=(0.0,),
        p_respawn=(0.005,),
        max_steps=2000,
    ),
}


@functools.cache
def tabular_level(name: str) -> GridLevel:
    """One of the LPG tabular levels (`TABULAR_LEVELS`): fixed, respawning at home cells.

    Args:
        name: dense, sparse, long, longer or long_dense.

    Returns:
        The GridLevel.
    """
    spec = TABULAR_LEVELS[name]
    layout = parse_layout(spec.layout)
    return GridLevel(
        walls=jnp.asarray(layout.walls),
        size=jnp.int32(layout.size),
        start=jnp.int32(layout.start),
        object_cells=jnp.asarray(layout.object_cells),
        object_types=jnp.asarray(layout.object_types),
        rewards=_padded(spec.rewards),
        p_terminate=_padded(spec.p_terminate),
        p_respawn=_padded(spec.p_respawn),
        max_steps_in_episode=jnp.int32(spec.max_steps),
        random_respawn=jnp.bool_(False),
    )


# ----------------------------------------------------------------------------------------
# Sampling helpers.


def _log_uniform(key: jax.Array, shape: tuple[int, ...], low: float, high: float) -> jax.Array:
    return jnp.exp(jax.random.uniform(key, shape, minval=math.log(low), maxval=math.log(high)))


def _log_uniform_int(key: jax.Array, low: int, high: int) -> jax.Array:
    """An int32 in [low, high] whose log is uniform (floor of exp(U[log low, log(high+1)]))."""
    value = jnp.floor(_log_uniform(key, (), low, high + 1))
    return jnp.clip(value, low, high).astype(jnp.int32)


def _mask_types(values: jax.Array, num_types: int) -> jax.Array:
    return jnp.where(jnp.arange(MAX_TYPES) < num_types, values, 0.0).astype(jnp.float32)


def _probabilities(key: jax.Array, num_types: int) -> tuple[jax.Array, jax.Array]:
    """p_terminate log-uniform in [1e-2, 1], p_respawn log-uniform in [1e-3, 1e-1] per type."""
    key_terminate, key_respawn = jax.random.split(key)
    p_terminate = _log_uniform(key_terminate, (MAX_TYPES,), 1e-2, 1.0)
    p_respawn = _log_uniform(key_respawn, (MAX_TYPES,), 1e-3, 1e-1)
    return _mask_types(p_terminate, num_types), _mask_types(p_respawn, num_types)


def reachable_from(free: jax.Array, start: jax.Array) -> jax.Array:
    """The free cells connected to `start` by up/right/down/left moves (a flood fill).

    Args:
        free: bool[MAX_CELLS], the cells one may stand on.
        start: int32 cell.

    Returns:
        bool[MAX_CELLS]; includes `start` when it is free.
    """
    grid = free.reshape(MAX_SIZE, MAX_SIZE)

    def grow(carry):
        _, region = carry
        padded = jnp.pad(region, 1)
        neighbours = padded[:-2, 1:-1] | padded[2:, 1:-1] | padded[1:-1, :-2] | padded[1:-1, 2:]
        return region, (region | neighbours) & grid

    seed = (jnp.arange(MAX_CELLS) == start).reshape(MAX_SIZE, MAX_SIZE) & grid
    _, region = jax.lax.while_loop(
        lambda carry: jnp.any(carry[0] != carry[1]), grow, (jnp.zeros_like(grid), seed)
    )
    return region.reshape(-1)


# ----------------------------------------------------------------------------------------
# Mazes.

MAZES: dict[str, str] = {
    "corridors": """
        .............
        ############.
        .............
        .############
        .............
        ############.
        .............
        .############
        .............
        ############.
        .............
        .############
        .............
    """,
    "rooms": """
        ......#......
        ......#......
        .............
        ......#......
        ......#......
        ......#......
        ##.######.###
        ......#......
        ......#......
        ......#......
        .............
        ......#......
        ......#......
    """,
    "spiral": """
        .............
        .###########.
        .#.........#.
        .#.#######.#.
        .#.#.....#.#.
        .#.#.###.#.#.
        .#.#.#.#.#.#.
        .#.#.#...#.#.
        .#.#.#####.#.
        .#.#.......#.
        .#.#########.
        .#...........
        .############
    """,
}
MAZE_OBJECTS = 3  # of types 0, 1, 2


def maze_level(key: jax.Array, maze_name: str) -> GridLevel:
    """A maze with its start, 3 objects (types 0, 1, 2) and dynamics drawn from `key`.

    Start and object cells are distinct free cells; rewards U[0, 1], p_terminate log-uniform
    [1e-2, 1], p_respawn log-uniform [1e-3, 1e-1] per type, max_steps a log-uniform integer in
    [25, 50]; objects respawn at their home cells. Jittable with `maze_name` static.

    Args:
        key: PRNG key.
        maze_name: a key of MAZES.

    Returns:
        The GridLevel.
    """
    layout = parse_layout(MAZES[maze_name])
    # Each maze draws from its own stream: the same seed gives unrelated levels in two mazes.
    key = jax.random.fold_in(key, list(MAZES).index(maze_name))
    free = inside_mask(layout.size) & ~jnp.asarray(layout.walls)
    key_cells, key_rewards, key_probabilities, key_steps = jax.random.split(key, 4)
    cells = jax.random.choice(
        key_cells, MAX_CELLS, (1 + MAZE_OBJECTS,), replace=False, p=free.astype(jnp.float32)
    ).astype(jnp.int32)
    slot = jnp.arange(MAX_OBJECTS)
    used = slot < MAZE_OBJECTS
    object_cells = jnp.zeros(MAX_OBJECTS, jnp.int32).at[:MAZE_OBJECTS].set(cells[1:])
    rewards = jax.random.uniform(key_rewards, (MAX_TYPES,))
    p_terminate, p_respawn = _probabilities(key_probabilities, MAZE_OBJECTS)
    return GridLevel(
        walls=jnp.asarray(layout.walls),
        size=jnp.int32(layout.size),
        start=cells[0],
        object_cells=object_cells,
        object_types=jnp.where(used, slot, -1).astype(jnp.int32),
        rewards=_mask_types(rewards, MAZE_OBJECTS),
        p_terminate=p_terminate,
        p_respawn=p_respawn,
        max_steps_in_episode=_log_uniform_int(key_steps, 25, 50),
        random_respawn=jnp.bool_(False),
    )


# ----------------------------------------------------------------------------------------
# Random level distributions.


class LevelDistribution(NamedTuple):
    """A distribution of random levels (static: hashable, one compile per distribution).

    Attributes:
        name: how level names refer to it (`Grid-<name>:level=N`).
        size: (min, max) side of the level, inclusive.
        objects: (min, max) number of objects, inclusive.
        num_types: object i has type i mod num_types, so type 0 (the one with a non-negative
            reward) is in every level and the first num_types objects have distinct types.
        num_walls: wall cells drawn among the top-left max-size square; those outside the
            drawn size fall away, and so do any beyond what leaves room for start and objects.
        max_steps: (min, max) of the log-uniform integer time limit, inclusive.
        random_respawn: False (tabular: objects respawn at home) or True.
    """

    name: str
    size: tuple[int, int]
    objects: tuple[int, int]
    num_types: int
    num_walls: int
    max_steps: tuple[int, int]
    random_respawn: bool = False


SMALL = LevelDistribution("small", (4, 6), (1, 3), 3, 7, (20, 100))
MEDIUM = LevelDistribution("medium", (6, 8), (2, 4), 4, 10, (100, 250))
ALL = LevelDistribution("all", (4, 10), (1, 5), 5, 15, (20, 750))
DISTRIBUTIONS: dict[str, LevelDistribution] = {d.name: d for d in (SMALL, MEDIUM, ALL)}


def _check(distribution: LevelDistribution) -> None:
    low, high = distribution.size
    if not (1 <= low <= high <= MAX_SIZE):
        raise ValueError(f"{distribution.name}: sizes must lie in [1, {MAX_SIZE}]")
    if not (1 <= distribution.objects[0] <= distribution.objects[1] <= MAX_OBJECTS):
        raise ValueError(f"{distribution.name}: 1 to {MAX_OBJECTS} objects")
    if not (1 <= distribution.num_types <= MAX_TYPES):
        raise ValueError(f"{distribution.name}: 1 to {MAX_TYPES} object types")
    if low * low < 1 + distribution.objects[1] or distribution.num_walls > high * high:
        raise ValueError(f"{distribution.name}: no room for start, objects or walls")


def sample_level(key: jax.Array, distribution: LevelDistribution) -> GridLevel:
    """A random level of `distribution`, a pure function of `key`.

    In order: the size; `num_walls` distinct wall cells in the max-size square, in random
    order, keeping those inside the level up to a budget that leaves room for the start and
    objects; the number of objects; the start, uniform over free cells; the object cells,
    distinct, uniform over free cells reachable from the start (over all free cells in the
    rare level where too few are reachable); then rewards U[-1, 1] per type, but U[0, 1] for
    type 0, p_terminate log-uniform [1e-2, 1], p_respawn log-uniform [1e-3, 1e-1] and the time
    limit. Jittable and vmappable over keys with `distribution` static.

    Args:
        key: PRNG key.
        distribution: the LevelDistribution.

    Returns:
        The GridLevel: start and objects on distinct free cells inside the level.
    """
    _check(distribution)
    keys = jax.random.split(key, 8)
    size = jax.random.randint(keys[0], (), distribution.size[0], distribution.size[1] + 1)
    num_objects = jax.random.randint(
        keys[1], (), distribution.objects[0], distribution.objects[1] + 1
    )
    inside = inside_mask(size)
    walls = jnp.zeros(MAX_CELLS, bool)
    if distribution.num_walls:
        area = inside_mask(distribution.size[1]).astype(jnp.float32)
        order = jax.random.choice(
            keys[2], MAX_CELLS, (distribution.num_walls,), replace=False, p=area
        )
        in_level = inside[order]
        budget = size * size - 1 - num_objects
        walls = walls.at[order].set(in_level & (jnp.cumsum(in_level) <= budget))
    free = inside & ~walls

    cells = jnp.arange(MAX_CELLS)
    start = jax.random.choice(keys[3], MAX_CELLS, p=free.astype(jnp.float32)).astype(jnp.int32)
    targets = reachable_from(free, start) & (cells != start)
    targets = jnp.where(targets.sum() >= num_objects, targets, free & (cells != start))
    picks = jax.random.choice(
        keys[4], MAX_CELLS, (MAX_OBJECTS,), replace=False, p=targets.astype(jnp.float32)
    )
    slot = jnp.arange(MAX_OBJECTS)
    used = slot < num_objects

    rewards = jax.random.uniform(keys[5], (MAX_TYPES,), minval=-1.0, maxval=1.0)
    rewards = rewards.at[0].set(jnp.abs(rewards[0]))  # |U[-1, 1]| is U[0, 1]
    p_terminate, p_respawn = _probabilities(keys[6], distribution.num_types)
    return GridLevel(
        walls=walls,
        size=size.astype(jnp.int32),
        start=start,
        object_cells=jnp.where(used, picks, 0).astype(jnp.int32),
        object_types=jnp.where(used, slot % distribution.num_types, -1).astype(jnp.int32),
        rewards=_mask_types(rewards, distribution.num_types),
        p_terminate=p_terminate,
        p_respawn=p_respawn,
        max_steps_in_episode=_log_uniform_int(keys[7], *distribution.max_steps),
        random_respawn=jnp.bool_(distribution.random_respawn),
    )


# Names draw through these compiled functions. A key gives the same level bit for bit from
# one compiled program; op-by-op evaluation of the same function may differ in the last bit of
# a log-uniform probability (XLA fuses the exp differently), so names never use it.
_sample_level = jax.jit(sample_level, static_argnums=1)
_maze_level = jax.jit(maze_level, static_argnums=1)

# ----------------------------------------------------------------------------------------
# Names.

TABULAR = tuple(GRID_PREFIX + name for name in TABULAR_LEVELS)
MAZE_NAMES = tuple(f"{GRID_PREFIX}maze_{name}" for name in MAZES)
DISTRIBUTION_NAMES = tuple(GRID_PREFIX + name for name in DISTRIBUTIONS)
# Fields a name may change on any level besides the seed, e.g. `Grid-dense:random_respawn=1`.
CHANGEABLE = ("max_steps_in_episode", "random_respawn")


def is_grid(name: str) -> bool:
    """Whether `name` (possibly a variant) names a grid level rather than a gymnax env: any
    `Grid-` name, so that a misspelt one gets the grid levels' error from `level_from_name`."""
    return split_variant(name)[0].startswith(GRID_PREFIX)


def _valid_names() -> str:
    seeded = f"[:{SEED_FIELD}=N]"
    return ", ".join([*TABULAR, *(n + seeded for n in MAZE_NAMES + DISTRIBUTION_NAMES)])


def level_name(distribution_name: str, seed: int) -> str:
    """The name of the level drawn with PRNGKey(seed) from a distribution or maze.

    Args:
        distribution_name: small, medium, all or maze_<name>, with or without `Grid-`.
        seed: a non-negative int.

    Returns:
        e.g. `Grid-small:level=17`.
    """
    base = distribution_name
    if not base.startswith(GRID_PREFIX):
        base = GRID_PREFIX + base
    if base not in MAZE_NAMES + DISTRIBUTION_NAMES:
        raise UnknownEnvironment(
            f"no level distribution {distribution_name!r}; grid levels: {_valid_names()}"
        )
    return f"{base}:{SEED_FIELD}={int(seed)}"


def level_from_name(name: str) -> GridLevel:
    """The level a name refers to (computed eagerly, also while a caller is being traced: a
    trainer builds its environment inside `jit`, and the level must be a constant there).

    Args:
        name: `Grid-<tabular>`, `Grid-maze_<maze>[:level=N]` or `Grid-<distribution>[:level=N]`
            (seed N, default 0), optionally changing `max_steps_in_episode` or
            `random_respawn` (`+field=value`).

    Returns:
        The GridLevel (concrete arrays; the same name always gives the same level).

    Raises:
        UnknownEnvironment: an unknown level, a seed on a fixed level, a bad seed or field.
    """
    with jax.ensure_compile_time_eval():
        return _level_from_name(name)


def _level_from_name(name: str) -> GridLevel:
    base, changes = split_variant(name)
    level_part = base[len(GRID_PREFIX) :]
    seed = changes.pop(SEED_FIELD, None)
    if base in TABULAR:
        if seed is not None:
            raise UnknownEnvironment(f"{base} is a fixed level; it takes no {SEED_FIELD}=N")
        level = tabular_level(level_part)
    elif base in MAZE_NAMES + DISTRIBUTION_NAMES:
        seed = 0.0 if seed is None else seed
        if seed != int(seed) or not 0 <= seed < 2**32:
            raise UnknownEnvironment(f"{name}: {SEED_FIELD} must be an integer in [0, 2**32)")
        key = jax.random.PRNGKey(int(seed))
        if base in MAZE_NAMES:
            level = _maze_level(key, level_part.removeprefix("maze_"))
        else:
            level = _sample_level(key, DISTRIBUTIONS[level_part])
    else:
        raise UnknownEnvironment(f"unknown grid level {base!r}; grid levels: {_valid_names()}")
    unknown = sorted(set(changes) - set(CHANGEABLE))
    if unknown:
        raise UnknownEnvironment(
            f"{base} cannot change {', '.join(unknown)}; it can change: "
            f"{', '.join((SEED_FIELD, *CHANGEABLE) if base not in TABULAR else CHANGEABLE)}"
        )
    typed = {
        field: jnp.asarray(value, getattr(level, field).dtype) for field, value in changes.items()
    }
    return level.replace(**typed)
