"""Build the trainer and the references of a meta-RL environment name (names.py).

`make_meta_env_trainer(config, components, lr)` is what trainers.make_trainer hands a
`Meta-<method>/<family>/<role>` config to: RL² (rl2.py) or MAML (maml.py) over the family's
tasks (tasks.py), wrapped by loop.py into PPO's `Trainer` contract. Their settings
are in configs.py (`META_CONFIGS`, `MAML_SETTINGS`), the one settings source.
"""

from __future__ import annotations

from functools import lru_cache

import jax
import jax.numpy as jnp

from metarl.rl.components import Components
from metarl.rl.configs import MAML_SETTINGS, PPOConfig
from metarl.rl.meta.loop import ROLE_SALTS, make_meta_trainer
from metarl.rl.meta.maml import MAMLSettings, make_maml_learner
from metarl.rl.meta.names import UnknownMetaEnv, parse_meta
from metarl.rl.meta.rl2 import make_rl2_learner
from metarl.rl.meta.tasks import FAMILIES, TaskFamily, sample_tasks
from metarl.rl.trainer import Trainer, learning_rate_schedule

EVAL_TASKS = 64  # held-out tasks each adaptation curve is averaged over


def family_of(name: str) -> TaskFamily:
    meta = parse_meta(name)
    if meta.family not in FAMILIES:
        raise UnknownMetaEnv(f"unknown task family {meta.family!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[meta.family]


def maml_settings(family: str, **changes) -> MAMLSettings:
    """The family's MAML settings (configs.MAML_SETTINGS) with `changes` applied."""
    return MAMLSettings(**{**MAML_SETTINGS[family], "eval_tasks": EVAL_TASKS, **changes})


def make_meta_env_trainer(
    config: PPOConfig,
    components: Components = Components(),
    lr=None,
    memory: bool = True,
    scratch: bool = True,
) -> Trainer:
    """The `Trainer` of a meta-RL config (trainers.py dispatches here; `lr` as ppo.make_trainer).

    Args:
        config: a config whose env_name is `Meta-<method>/<family>/<role>`.
        components: the candidate: RL²'s outer PPO (drift and optimizer), MAML's inner rule
            (optimizer).
        lr: a traced peak learning rate of a sweep row, or None for config.lr.
        memory: RL² only; False trains the memoryless baseline.
        scratch: train the from-scratch reference too (loop.make_meta_trainer).
    """
    meta = parse_meta(config.env_name)
    family = family_of(config.env_name)
    if meta.method == "rl2":
        schedule = learning_rate_schedule(config, lr)
        learner = make_rl2_learner(config, components, family, schedule, EVAL_TASKS, memory)
    else:
        # the outer Adam steps once per meta-update (PPO: epochs x minibatches times)
        schedule = learning_rate_schedule(config.replace(num_minibatches=1, update_epochs=1), lr)
        settings = maml_settings(family.name)
        expected = (settings.inner_steps + 1) * settings.episodes * family.horizon
        if config.num_steps != expected:
            raise ValueError(f"MAML on {family.name} needs num_steps = {expected}")
        learner = make_maml_learner(config, components, family, settings, schedule)
    return make_meta_trainer(config, learner, meta.role, scratch)


@lru_cache(maxsize=None)
def random_adaptation_return(name: str, rng_seed: int = 0) -> float:
    """The uniform random policy's mean episode return on the family's tasks (it adapts to
    nothing, so its curve is flat: the normaliser's floor)."""
    family = family_of(name)
    env = family.env

    def episode(key):
        key_task, key_reset, key_steps = jax.random.split(key, 3)
        task = family.sample_task(key_task)
        obs, state = env.reset_env(key_reset, task)

        def step(state, key):
            key_action, key_step = jax.random.split(key)
            action = jax.random.randint(key_action, (), 0, family.num_actions)
            _, state, reward, _, _ = env.step_env(key_step, state, action, task)
            return state, reward

        _, rewards = jax.lax.scan(step, state, jax.random.split(key_steps, family.horizon))
        return rewards.sum()

    keys = jax.random.split(
        jax.random.fold_in(jax.random.PRNGKey(rng_seed), ROLE_SALTS["test"]), 4096
    )
    return float(jnp.mean(jax.jit(jax.vmap(episode))(keys)))


__all__ = [
    "family_of",
    "make_meta_env_trainer",
    "maml_settings",
    "random_adaptation_return",
    "sample_tasks",
]
