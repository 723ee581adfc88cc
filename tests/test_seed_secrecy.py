"""A training seed's value is a secret of the run's pool (evaluation/seeds.py): no reason,
warning, log line or prompt names it. A failure names the seed by its position in the batch
("training seed 2 of 2"), which is all a proposer can act on.

The pool here is pinned to recognisable values, so any text that carries one is caught, in
decimal or hexadecimal; tests/test_stages.py runs the trainer's whole path on them.
"""

from __future__ import annotations

import pytest

from metarl.evaluation import stages
from metarl.rl.configs import PPOConfig
from metarl.rl.training import EnvRun

POOL = [1357913579, 2046802468]  # recognisable, and in [0, 2^31)


def leaked(text: str) -> list[int]:
    """The pool values `text` carries (decimal, or hexadecimal with or without 0x)."""
    lowered = text.lower()
    return [v for v in POOL if str(v) in text or f"{v:x}" in lowered]


@pytest.mark.parametrize("index", [0, 1])
def test_a_failed_run_names_its_seed_by_position(index):
    config = PPOConfig(env_name="CartPole-v1")
    run = EnvRun(
        env="CartPole-v1",
        seeds=list(POOL),
        total_timesteps=1024,
        final_returns=[1.0, 1.0],
        curve_steps=[],
        curve=[],
        compile_s=0.0,
        run_s=0.0,
    )
    for update, seed in (("nonfinite_update", "nonfinite_seed_index"),
                         ("negative_drift_update", "negative_drift_seed_index")):  # fmt: skip
        failing = EnvRun(**{**run.__dict__, update: 3, seed: index, "min_drift": -0.5})
        with pytest.raises(stages.StageFailure) as error:
            stages.check_run(failing, config)
        assert f"training seed {index + 1} of 2" in str(error.value)
        assert leaked(str(error.value)) == []
