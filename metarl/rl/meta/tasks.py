"""Task families for meta-RL: gymnax environments whose `EnvParams` *is* the task.

A meta-RL learner is trained on a distribution of tasks and scored by how fast it adapts to a
new one (Duan et al. 2016, RL²; Finn et al. 2017, MAML). As with the grid levels
(gridworld.py), making the task the environment's params means one compiled program vmaps over
a batch of tasks, and `sample_task(key)` is the whole distribution.

Every family has fixed-length episodes (`horizon` steps, no early termination), so a *trial*
(`episodes` episodes of one task, the unit of experience of RL²) is exactly
`episodes * horizon` steps and every batch of trials has one shape. The families:

- `bandit-tasks`: a two-armed Bernoulli bandit with arm probabilities (p, 1 - p), p uniform
  (the "dependent arms" bandit of Wang et al. 2016). An episode is one pull, a trial ten; the
  observation is constant, so a policy without memory cannot do better than 0.5 in
  expectation, and anything above it on later pulls is adaptation.
- `point-tasks`: MAML's 2D navigation (Finn et al. 2017, section 5.3) with five discrete moves
  of 0.1 (stay, up, right, down, left): start at the origin, reward minus the distance to a
  goal drawn uniformly in [-0.5, 0.5]^2 that the observation (the position) does not show.
  Episodes of 20 steps.
- `pendulum-tasks`: gymnax's Pendulum-v1 dynamics with five torques (-2, -1, 0, 1, 2) and its
  gravity, mass and length drawn per task (g in [6, 14], m and l in [0.5, 1.5]); episodes of
  100 steps.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces
from gymnax.environments.classic_control import pendulum


@struct.dataclass
class BanditTask:
    """A two-armed Bernoulli bandit: `probs[i]` is the chance arm i pays 1."""

    probs: jax.Array  # float32[2]
    max_steps_in_episode: int = 1


@struct.dataclass
class BanditState:
    time: jax.Array


class TwoArmedBandit(environment.Environment):
    """Each step pulls an arm; the observation is constant (the bandit shows nothing)."""

    @property
    def default_params(self) -> BanditTask:
        return BanditTask(probs=jnp.asarray([0.8, 0.2], jnp.float32))

    def step_env(self, key, state, action, params):
        reward = jax.random.bernoulli(key, params.probs[action]).astype(jnp.float32)
        state = BanditState(time=state.time + 1)
        done = self.is_terminal(state, params)
        return self.get_obs(state), state, reward, done, {}

    def reset_env(self, key, params):
        state = BanditState(time=jnp.asarray(0, jnp.int32))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        return jnp.ones((1,), jnp.float32)

    def is_terminal(self, state, params) -> jax.Array:
        return state.time >= params.max_steps_in_episode

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(1.0, 1.0, (1,), jnp.float32)


def sample_bandit(key: jax.Array) -> BanditTask:
    p = jax.random.uniform(key, dtype=jnp.float32)
    return BanditTask(probs=jnp.stack([p, 1.0 - p]))


@struct.dataclass
class PointTask:
    """A goal on the plane the agent must find."""

    goal: jax.Array  # float32[2]
    max_steps_in_episode: int = 20


@struct.dataclass
class PointState:
    position: jax.Array
    time: jax.Array


# stay, up, right, down, left. Module constants are numpy, not jax arrays: JAX 0.9 passes a
# closed-over jax.Array to a jitted program as an extra input, which an ahead-of-time compiled
# program (training.BatchProgram) is then called without ("compiled for 27 inputs but called
# with 23"); a numpy constant is embedded in the program.
POINT_MOVES = 0.1 * np.asarray([[0, 0], [0, 1], [1, 0], [0, -1], [-1, 0]], np.float32)


class PointGoal(environment.Environment):
    """MAML's 2D navigation with discrete moves; the goal is hidden in the task."""

    @property
    def default_params(self) -> PointTask:
        return PointTask(goal=jnp.asarray([0.3, -0.2], jnp.float32))

    def step_env(self, key, state, action, params):
        position = state.position + jnp.asarray(POINT_MOVES)[action]
        reward = -jnp.linalg.norm(position - params.goal)
        state = PointState(position=position, time=state.time + 1)
        return self.get_obs(state), state, reward, self.is_terminal(state, params), {}

    def reset_env(self, key, params):
        state = PointState(position=jnp.zeros((2,), jnp.float32), time=jnp.asarray(0, jnp.int32))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        return state.position

    def is_terminal(self, state, params) -> jax.Array:
        return state.time >= params.max_steps_in_episode

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(len(POINT_MOVES))

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)


def sample_point(key: jax.Array) -> PointTask:
    return PointTask(goal=jax.random.uniform(key, (2,), jnp.float32, -0.5, 0.5))


PENDULUM_TORQUES = np.asarray([-2.0, -1.0, 0.0, 1.0, 2.0], np.float32)


class DiscretePendulum(pendulum.Pendulum):
    """gymnax's Pendulum-v1 with five torques; the task is its (g, m, l)."""

    @property
    def default_params(self) -> pendulum.EnvParams:
        return pendulum.EnvParams(max_steps_in_episode=100)

    def step_env(self, key, state, action, params):
        return super().step_env(key, state, jnp.asarray(PENDULUM_TORQUES)[action], params)

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(len(PENDULUM_TORQUES))


def sample_pendulum(key: jax.Array) -> pendulum.EnvParams:
    key_g, key_m, key_l = jax.random.split(key, 3)
    return pendulum.EnvParams(
        g=jax.random.uniform(key_g, (), jnp.float32, 6.0, 14.0),
        m=jax.random.uniform(key_m, (), jnp.float32, 0.5, 1.5),
        l=jax.random.uniform(key_l, (), jnp.float32, 0.5, 1.5),
        max_steps_in_episode=100,
    )


class TaskFamily(NamedTuple):
    """A distribution of tasks and the shape of a trial on one.

    Attributes:
        name: the family's name (its suites are `<name>@rl2` and `<name>@maml`).
        env: the gymnax environment; its params are the task.
        sample_task: `sample_task(key) -> params`, the distribution.
        horizon: steps per episode (every episode has exactly this many).
        episodes: episodes per trial (RL²'s unit of experience).
        description: one line for `metarl suites` and the README.
    """

    name: str
    env: environment.Environment
    sample_task: Callable[[jax.Array], Any]
    horizon: int
    episodes: int
    description: str

    @property
    def num_actions(self) -> int:
        return int(self.env.action_space().n)

    @property
    def obs_size(self) -> int:
        return int(self.env.observation_space(self.env.default_params).shape[0])

    @property
    def trial_length(self) -> int:
        return self.horizon * self.episodes


FAMILIES: dict[str, TaskFamily] = {
    f.name: f
    for f in (
        TaskFamily(
            "bandit-tasks",
            TwoArmedBandit(),
            sample_bandit,
            horizon=1,
            episodes=10,
            description="two-armed Bernoulli bandits, arms (p, 1-p): a trial is 10 pulls",
        ),
        TaskFamily(
            "point-tasks",
            PointGoal(),
            sample_point,
            horizon=20,
            episodes=3,
            description="MAML's 2D navigation to a hidden goal (discrete moves): 3 episodes "
            "of 20 steps per trial",
        ),
        TaskFamily(
            "pendulum-tasks",
            DiscretePendulum(),
            sample_pendulum,
            horizon=100,
            episodes=2,
            description="Pendulum with 5 torques and drawn gravity, mass, length: 2 episodes "
            "of 100 steps per trial",
        ),
    )
}


def sample_tasks(family: TaskFamily, key: jax.Array, count: int) -> Any:
    """`count` tasks stacked along a leading axis (vmap-ready)."""
    return jax.vmap(family.sample_task)(jax.random.split(key, count))


class Episodes(NamedTuple):
    """Whole episodes on one task ([episodes, horizon, ...] leaves)."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    extra: Any  # what the policy recorded beside each action (log-probs, values), or ()


def run_episodes(
    family: TaskFamily, act: Callable, key: jax.Array, task: Any, count: int
) -> Episodes:
    """`count` episodes of `family.horizon` steps on `task`, vmapped.

    Args:
        family: the task family.
        act: `act(key, obs) -> (action, extra)`: the policy (a memoryless one).
        key: PRNG key for resets, actions and the environment.
        task: the task (the env's params).
        count: how many episodes.

    Returns:
        The `Episodes`.
    """
    env = family.env

    def episode(key):
        key_reset, key_steps = jax.random.split(key)
        obs, state = env.reset_env(key_reset, task)

        def step(carry, key):
            obs, state = carry
            key_action, key_step = jax.random.split(key)
            action, extra = act(key_action, obs)
            obs_next, state, reward, _, _ = env.step_env(key_step, state, action, task)
            record = (obs, action, reward.astype(jnp.float32), extra)
            return (obs_next.astype(jnp.float32), state), record

        _, record = jax.lax.scan(
            step, (obs.astype(jnp.float32), state), jax.random.split(key_steps, family.horizon)
        )
        return Episodes(*record)

    return jax.vmap(episode)(jax.random.split(key, count))
