"""Which trainer trains a config: PPO, or the meta-learner a `Meta-<method>/...` name names.

Above both (ppo.py, rl/meta/envs.py), so neither imports the other: every layer that trains a
config calls `make_trainer` or `make_train` here.
"""

from __future__ import annotations

import jax

from metarl.rl import ppo
from metarl.rl.components import Components
from metarl.rl.configs import PPOConfig
from metarl.rl.meta.envs import make_meta_env_trainer
from metarl.rl.meta.names import is_meta
from metarl.rl.trainer import Trainer, whole_run


def make_trainer(
    config: PPOConfig,
    components: Components = Components(),
    lr: jax.Array | float | None = None,
    scratch: bool = True,
) -> Trainer:
    """The `Trainer` of `config` (see ppo.make_trainer for `lr` and segments); `scratch`:
    a meta-RL trainer also trains its from-scratch reference (rl/meta/loop.py)."""
    if is_meta(config.env_name):
        return make_meta_env_trainer(config, components, lr, scratch=scratch)
    return ppo.make_trainer(config, components, lr)


def make_train(config: PPOConfig, components: Components = Components()):
    """Build `train(rng) -> TrainResult` for one seed (the whole run as one segment); vmap it
    over seeds and jit."""
    return whole_run(make_trainer(config, components), config.num_updates)
