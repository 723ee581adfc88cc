"""Full-budget check that the trainer is a working PPO (slow: ~1 minute on 2 CPU cores)."""

import numpy as np
import pytest

from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.training import run_training


@pytest.mark.slow
def test_ppo_clip_with_adam_solves_cartpole():
    run = run_training(default_config("CartPole-v1"), Components(), seeds=[0, 1, 2, 3])
    assert run.finite
    assert run.total_timesteps >= 499_000
    assert np.mean(run.final_returns) >= 450, run.final_returns
