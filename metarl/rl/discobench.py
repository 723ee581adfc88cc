"""DiscoGen 1.3.0's MinAtar OnPolicyRL setting (DiscoBench, Goldie et al.) as metarl constants,
so the `discobench` suite and protocol score a candidate with DiscoGen's own numbers.

Read from DiscoGen 1.3.0's installed package, `discogen/domains/OnPolicyRL/`:

- `datasets/MinAtar/<Game>/config.py`: the PPO config, the same dict for Breakout, Freeway,
  Asterix and SpaceInvaders (`DISCOGEN_MINATAR_CONFIG`, verbatim);
- `templates/default/main.py`: 8 seeds x 10 learning rates `jnp.linspace(LR, 10 * LR, 10)`;
  after training, a greedy evaluation (`pi.mode()`) of 16 episodes per seed from fresh resets,
  each counted up to its first done; a rate's score is the mean over seeds of the mean over
  episodes, and the reported score is the best rate's;
- `templates/default/base/networks.py`, `activation.py`, `optim.py`: two hidden layers of
  HSIZE, relu for discrete actions, Adam (b1 0.9, b2 0.999) with eps 1e-5.

tests/test_discobench.py checks these against an installed DiscoGen, so an upgrade that changes
a number fails loudly instead of silently scoring under another protocol.
"""

from __future__ import annotations

# datasets/MinAtar/{Breakout,Freeway,Asterix,SpaceInvaders}/config.py, verbatim
DISCOGEN_MINATAR_CONFIG = {
    "LR": 1e-3,
    "NUM_ENVS": 64,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 1e7,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 8,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "HSIZE": 64,
    "MAX_GRAD_NORM": 0.5,
    "SCHEDULE_LR": True,
    "CONTINUOUS": False,
}

# the games DiscoGen has MinAtar configs for: its dataset folder -> metarl's env name
DISCOBENCH_GAMES = {
    "Asterix": "Asterix-MinAtar",
    "Breakout": "Breakout-MinAtar",
    "Freeway": "Freeway-MinAtar",
    "SpaceInvaders": "SpaceInvaders-MinAtar",
}

# main.py: seeds per learning rate, greedy episodes per seed
DISCOBENCH_SEEDS = 8
DISCOBENCH_EVAL_EPISODES = 16

# main.py's `jnp.linspace(config["LR"], config["LR"] * 10, 10)`, in float64 (DiscoGen's are
# float32; a swept rate is cast to float32 in training, within an ulp of DiscoGen's). Computed
# as numpy.linspace computes it (start + i * step, the last rate exactly the stop) without
# importing numpy: the protocols read this module, and `metarl discover --help` the protocols.
_LOW, _HIGH = DISCOGEN_MINATAR_CONFIG["LR"], 10 * DISCOGEN_MINATAR_CONFIG["LR"]
_STEP = (_HIGH - _LOW) / 9
DISCOBENCH_RATES: tuple[float, ...] = (*(_LOW + i * _STEP for i in range(9)), _HIGH)

_C = DISCOGEN_MINATAR_CONFIG
# the same config as PPOConfig fields (rl/configs.py); the network and optimizer facts come from
# networks.py, activation.py and optim.py, the greedy evaluation from main.py
DISCOBENCH_MINATAR = dict(
    total_timesteps=int(_C["TOTAL_TIMESTEPS"]),
    num_envs=_C["NUM_ENVS"],
    num_steps=_C["NUM_STEPS"],
    update_epochs=_C["UPDATE_EPOCHS"],
    num_minibatches=_C["NUM_MINIBATCHES"],
    lr=_C["LR"],
    anneal_lr=_C["SCHEDULE_LR"],
    gamma=_C["GAMMA"],
    gae_lambda=_C["GAE_LAMBDA"],
    clip_eps=_C["CLIP_EPS"],
    ent_coef=_C["ENT_COEF"],
    vf_coef=_C["VF_COEF"],
    max_grad_norm=_C["MAX_GRAD_NORM"],
    hidden_size=_C["HSIZE"],
    num_layers=2,
    activation="relu",
    adam_eps=1e-5,
    eval_episodes=DISCOBENCH_EVAL_EPISODES,
)
