"""PPO hyperparameters per environment family.

Sources:
- classic control (CartPole-v1, Acrobot-v1): purejaxrl's PPO defaults (4 envs x 128 steps,
  5e5 steps, lr 2.5e-4 linearly annealed, 4 epochs x 4 minibatches, gamma 0.99, lambda 0.95,
  clip 0.2, entropy 0.01, value 0.5, max grad norm 0.5, tanh MLP of width 64).
- MinAtar: the configs of learn-rl-algorithms / OPEN (Goldie et al.): 64 envs x 128 steps,
  1e7 steps, 4 epochs x 8 minibatches, relu MLP of width 64, per-game learning rates
  (Asterix 3e-3, Breakout 1e-2, Freeway 1e-3, SpaceInvaders 7e-3). Those configs also tune
  Adam's b2 per game (0.99 for three games); we keep Adam's b1=0.9, b2=0.999 everywhere so
  the task's Adam seed reproduces the baseline optimizer exactly on every environment.
- grid levels (`Grid-*`, levels.py) and every other small env: the classic-control defaults,
  untuned for them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from metarl.rl.environments.names import env_family
from metarl.rl.meta.names import UnknownMetaEnv, is_meta, parse_meta


@dataclass(frozen=True)
class PPOConfig:
    """Everything `make_train` needs besides the candidate. Frozen so it can key caches."""

    env_name: str
    total_timesteps: int = 500_000
    num_envs: int = 4
    num_steps: int = 128
    update_epochs: int = 4
    num_minibatches: int = 4
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    hidden_size: int = 64
    num_layers: int = 2
    activation: str = "tanh"
    # Number of points the learning curve is downsampled to; memory stays flat in run length.
    num_log_points: int = 64
    # > 0: the run is scored by a greedy evaluation of its final policy over this many
    # episodes (ppo.greedy_returns, DiscoGen's scoring) instead of its last training episodes
    eval_episodes: int = 0

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return max(1, self.total_timesteps // self.batch_size)

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    def replace(self, **changes) -> "PPOConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields as a dict; a field added after configs were first hashed is left out
        at its default (`_HASH_STABLE_DEFAULTS`), so every existing config keeps its hash, and
        with it its cached baselines and evaluation keys."""
        data = dataclasses.asdict(self)
        for name, default in _HASH_STABLE_DEFAULTS.items():
            if data[name] == default:
                del data[name]
        return data

    def config_hash(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# fields added after configs were first hashed -> the default `to_dict` leaves out
_HASH_STABLE_DEFAULTS = {"eval_episodes": 0}


CLASSIC_CONTROL = dict(
    total_timesteps=500_000,
    num_envs=4,
    num_steps=128,
    update_epochs=4,
    num_minibatches=4,
    lr=2.5e-4,
    activation="tanh",
)

MINATAR = dict(
    total_timesteps=10_000_000,
    num_envs=64,
    num_steps=128,
    update_epochs=4,
    num_minibatches=8,
    activation="relu",
)

MINATAR_LEARNING_RATES = {
    "Asterix-MinAtar": 3e-3,
    "Breakout-MinAtar": 1e-2,
    "Freeway-MinAtar": 1e-3,
    "SpaceInvaders-MinAtar": 7e-3,
}


# meta-RL (rl/meta/names.py: `Meta-<method>/<family>/<role>`). RL²: one trial per env per update
# (num_steps = the family's trial length); MAML: num_envs tasks per meta-update, num_steps =
# (inner steps + 1) x episodes x horizon, the env steps one task costs (so steps count true
# experience). Tuned on training tasks only (benchmarks/meta_rl.py, RESULTS.md). RL² on
# point-tasks: gamma 0.7, the best train-role area of 0.99, 0.95, 0.9, 0.8, 0.7, 0.5 (-7.65,
# -7.51, -5.00, -2.49, -2.31, -2.33; 3 seeds, 4e5 steps): at 0.99 it settles on standing still
# (the best action without adapting), at <= 0.8 it learns to climb the reward to the goal.
META_CONFIGS: dict[tuple[str, str], dict] = {
    ("rl2", "bandit-tasks"): dict(
        total_timesteps=200_000,
        num_envs=64,
        num_steps=10,
        lr=3e-3,
        hidden_size=32,
        gamma=0.9,
        ent_coef=0.01,
    ),
    ("rl2", "point-tasks"): dict(
        total_timesteps=400_000,
        num_envs=32,
        num_steps=60,
        lr=1e-3,
        hidden_size=64,
        gamma=0.7,
    ),
    ("rl2", "pendulum-tasks"): dict(
        total_timesteps=800_000,
        num_envs=16,
        num_steps=200,
        lr=1e-3,
        hidden_size=64,
    ),
    ("maml", "bandit-tasks"): dict(
        total_timesteps=200_000,
        num_envs=16,
        num_steps=2 * 16 * 1,
        lr=1e-2,
        hidden_size=32,
        num_layers=1,
        anneal_lr=False,
    ),
    ("maml", "point-tasks"): dict(
        total_timesteps=400_000,
        num_envs=16,
        num_steps=2 * 10 * 20,
        lr=1e-2,
        hidden_size=32,
        num_layers=1,
        anneal_lr=False,
    ),
    ("maml", "pendulum-tasks"): dict(
        total_timesteps=800_000,
        num_envs=8,
        num_steps=2 * 5 * 100,
        lr=1e-2,
        hidden_size=32,
        num_layers=1,
        anneal_lr=False,
    ),
}

# MAML's inner loop per family: steps K, the inner rule's step size, episodes per step (the
# `num_steps` above is (K + 1) x episodes x horizon and must agree; tests check it). First
# order in suites: the inner rule is candidate code, and differentiating *through* it breaks
# where the rule is fine (Adam's sqrt(v) has an infinite derivative at v = 0, reached whenever
# a task's batch has equal returns: NaN at the 3rd meta-update on bandit-tasks); second order
# is the learner's default (maml.MAMLSettings), used with SGD by benchmarks/meta_rl.py.
MAML_SETTINGS: dict[str, dict] = {
    "bandit-tasks": dict(inner_steps=1, inner_lr=0.1, episodes=16, first_order=True),
    "point-tasks": dict(inner_steps=1, inner_lr=0.1, episodes=10, first_order=True),
    "pendulum-tasks": dict(inner_steps=1, inner_lr=0.1, episodes=5, first_order=True),
}


def default_config(env_name: str, **overrides) -> PPOConfig:
    """The tuned PPO config for `env_name` (a variant `Base:field=value` gets its base's),
    with `overrides` applied on top."""
    family = env_name.partition(":")[0]
    if is_meta(env_name):
        meta = parse_meta(env_name)
        if (meta.method, meta.family) not in META_CONFIGS:
            raise UnknownMetaEnv(f"no meta-RL settings for {meta.family!r} under {meta.method}")
        base = dict(CLASSIC_CONTROL, **META_CONFIGS[(meta.method, meta.family)])
    elif family in MINATAR_LEARNING_RATES:
        base = dict(MINATAR, lr=MINATAR_LEARNING_RATES[family])
    elif family.endswith("-MinAtar"):
        base = dict(MINATAR, lr=3e-3)
    else:
        base = dict(CLASSIC_CONTROL)
    base.update(overrides)
    return PPOConfig(env_name=env_name, **base)


def program_key(config: PPOConfig) -> PPOConfig:
    """What decides a compiled training program: `config` with its env replaced by the env's
    family (`names.env_family`), so every level of a family shares one program, its level an
    input (rl/training.py `BatchProgram.on`). With a greedy evaluation the level's time limit
    is the evaluation's static length, so such a config keeps its own env (and program)."""
    family = None if is_meta(config.env_name) else env_family(config.env_name)
    if family is None or config.eval_episodes > 0:
        return config
    return config.replace(env_name=family)
