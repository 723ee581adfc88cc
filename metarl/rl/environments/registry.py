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

from metarl.rl.environments import gridworld, levels, seaquest
from metarl.rl.environments.names import (  # noqa: F401 (re-exported: the names of environments)
    VARIANT_SEPARATOR,
    UnknownEnvironment,
    base_name,
    env_family,
    split_variant,
)

# gymnax games that metarl steps through its own class: the same game, computed faster (each
# module says how, and its tests check it step by step against gymnax's)
SAME_GAME = {"Seaquest-MinAtar": seaquest.Seaquest}


class Step(NamedTuple):
    obs: jax.Array
    state: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: jax.Array


class FlatDiscreteEnv:
    """A gymnax environment with flat float observations and a discrete action space; a
    variant name (`split_variant`) changes its `EnvParams`."""

    def __init__(self, name: str):
        base, changes = split_variant(name)
        if levels.is_grid(name):
            # The level is the env's params; level_from_name applies the variant's changes.
            self.env, self.params = gridworld.GridWorld(), levels.level_from_name(name)
            changes = {}
        elif base not in gymnax.registered_envs:
            raise UnknownEnvironment(
                f"unknown environment {base!r}; gymnax knows: {', '.join(gymnax.registered_envs)}"
            )
        elif base in SAME_GAME:
            self.env = SAME_GAME[base]()
            self.params = self.env.default_params
        else:
            self.env, self.params = gymnax.make(base)
        self.name = name
        if changes:
            known = set(type(self.params).__dataclass_fields__)
            unknown = sorted(set(changes) - known)
            if unknown:
                raise UnknownEnvironment(
                    f"{base} has no parameter {', '.join(unknown)}; its parameters: "
                    f"{', '.join(sorted(known))}"
                )
            typed = {k: type(getattr(self.params, k))(v) for k, v in changes.items()}
            self.params = self.params.replace(**typed)
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

    @property
    def family(self) -> str | None:
        """The family this env is a member of (`names.env_family`): a trainer then takes its
        params as an input (`level`), one program for every member; None: its own."""
        return env_family(self.name)

    @property
    def level(self) -> Any:
        """This env's params as a program input (arrays, so every member of the family gives
        the same input types); None for an env of its own (see `family`)."""
        if self.family is None:
            return None
        return jax.tree.map(jnp.asarray, self.params)

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, Any]:
        """gymnax's reset, flat; `params` (a `level`) default to this env's own."""
        obs, state = self.env.reset(key, self.params if params is None else params)
        return self._flat(obs), state

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any = None) -> Step:
        """gymnax's step (auto-resetting), flat; `params` (a `level`) default to this env's
        own."""
        obs, state, reward, terminated, truncated, info = self.env.step(
            key, state, action, self.params if params is None else params
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
