"""gymnax environments behind one small interface the trainer needs.

Observations come out flat and float32 (MinAtar's 10x10xC boolean grids included), and each
step reports the value-bootstrapping facts PPO needs: whether the episode terminated, whether it
was truncated by the time limit, and the observation it was truncated at (`final_obs`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import gymnax
import jax
import jax.numpy as jnp

from metarl.errors import USAGE, MetarlError


class UnknownEnvironment(MetarlError, ValueError):
    """An environment gymnax does not have, or one metarl's discrete PPO cannot train on."""

    exit_code = USAGE


class Step(NamedTuple):
    obs: jax.Array
    state: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: jax.Array


class FlatDiscreteEnv:
    """A gymnax environment with flat float observations and a discrete action space."""

    def __init__(self, name: str):
        if name not in gymnax.registered_envs:
            raise UnknownEnvironment(
                f"unknown environment {name!r}; gymnax knows: {', '.join(gymnax.registered_envs)}"
            )
        self.name = name
        self.env, self.params = gymnax.make(name)
        action_space = self.env.action_space(self.params)
        if not hasattr(action_space, "n"):
            raise UnknownEnvironment(
                f"{name} has a continuous action space; metarl's PPO is discrete"
            )
        self.num_actions = int(action_space.n)
        self.obs_size = math.prod(self.env.observation_space(self.params).shape)
        self.max_steps = int(getattr(self.params, "max_steps_in_episode", 0))

    @staticmethod
    def _flat(obs: jax.Array) -> jax.Array:
        return jnp.reshape(obs, (-1,)).astype(jnp.float32)

    def reset(self, key: jax.Array) -> tuple[jax.Array, Any]:
        obs, state = self.env.reset(key, self.params)
        return self._flat(obs), state

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> Step:
        obs, state, reward, terminated, truncated, info = self.env.step(
            key, state, action, self.params
        )
        # gymnax flags truncation from the time counter even when the episode also terminated
        # on that step; a terminal step must never be bootstrapped.
        truncated = jnp.logical_and(truncated, jnp.logical_not(terminated))
        return Step(
            obs=self._flat(obs),
            state=state,
            reward=reward.astype(jnp.float32),
            terminated=terminated,
            truncated=truncated,
            final_obs=self._flat(info["final_observation"]),
        )


def make_env(name: str) -> FlatDiscreteEnv:
    return FlatDiscreteEnv(name)
