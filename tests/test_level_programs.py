"""A level is a parameter of the training program, not a constant (issue 38): every member of an
env family (all grid levels; the variants of a gymnax env) trains in one compiled program per
config and layout, its params an input, so a curriculum's new draws compile nothing."""

from __future__ import annotations

from dataclasses import asdict

import jax
import pytest

from metarl.evaluation import preflight, stages
from metarl.evaluation.settings import CascadeSettings, plan_runs
from metarl.platform import backend
from metarl.rl import training
from metarl.rl.configs import PPOConfig, program_key
from metarl.rl.environments.distributions import DISTRIBUTIONS
from metarl.rl.environments.names import env_family
from metarl.tasks import get_task

DRIFT = get_task("drift")
PLATFORM = backend()
LEVELS = list(DISTRIBUTIONS["grid-small"].draws(40, 3))  # none of the suite's fixed draws


def test_grid_levels_and_gymnax_variants_are_families_and_plain_envs_are_not():
    assert {env_family(name) for name in LEVELS} == {"Grid"}
    assert env_family("Grid-tabular_dense") == "Grid"
    assert env_family("CartPole-v1:gravity=12") == "CartPole-v1"
    assert env_family("CartPole-v1") is None
    assert env_family("Breakout-MinAtar") is None


def test_members_share_a_program_key_unless_a_greedy_evaluation_fixes_the_time_limit():
    a, b = (PPOConfig(env_name=name) for name in LEVELS[:2])
    assert program_key(a) == program_key(b) and a != b
    assert program_key(PPOConfig(env_name="CartPole-v1")) == PPOConfig(env_name="CartPole-v1")
    greedy = PPOConfig(env_name=LEVELS[0], eval_episodes=4)
    assert program_key(greedy) == greedy
    assert program_key(a) != program_key(a.replace(lr=a.lr * 2))  # the rest of the config counts


class CountingProgram(training.BatchProgram):
    """The real BatchProgram, counting how many are compiled (and for which envs)."""

    compiled: list[str] = []

    def __init__(self, config, *args, **kwargs):
        CountingProgram.compiled.append(config.env_name)
        super().__init__(config, *args, **kwargs)


@pytest.fixture
def counted(monkeypatch):
    CountingProgram.compiled = []
    monkeypatch.setattr(stages, "BatchProgram", CountingProgram)
    monkeypatch.setattr(preflight, "BatchProgram", CountingProgram)
    return CountingProgram.compiled


def _settings(envs: list[str]) -> CascadeSettings:
    return CascadeSettings(
        suite="grid-small",
        seeds=2,
        seed_values=[0, 1],
        total_timesteps=2560,  # 8 updates of 16 envs x 20 steps
        short_timesteps=1280,
        probe_seed=0,
        heldout=False,
        train_envs=envs,
        short_run_threshold=-1e9,  # every candidate trains on every level
    )


def _references(settings: CascadeSettings) -> dict:
    keys = list(dict.fromkeys(e.key for e in plan_runs(settings)))
    baselines = stages.train_baselines(DRIFT, settings, keys, PLATFORM)
    out = {}
    for key in keys:
        runs = [r for r in baselines.runs if r["key"] == key]
        returns = [v for r in runs for v in r["final_returns"]]
        out[key] = {
            "baseline_mean": sum(returns) / len(returns),
            "random_mean": baselines.random[runs[0]["env"]],
        }
    return out


def _scores(outcome) -> list[dict]:
    timings = {"compile_s": 0.0, "run_s": 0.0, "steps_per_s": 0.0}
    return [asdict(s) | timings for s in outcome.env_scores]


def test_a_batch_on_three_drawn_levels_compiles_one_program_and_scores_as_alone(counted):
    """Baselines and a batch of two candidates on three drawn grid levels: one compiled
    program each (the baseline's, the batch's), and every level's scores are bit for bit
    those of the same candidates evaluated on it alone (its own program)."""
    settings = _settings(LEVELS)
    references = _references(settings)
    assert counted == [LEVELS[0]]  # the baseline: one program for the three levels
    artifacts = [
        stages.trace_candidate(
            DRIFT, DRIFT.seed_program(name).source, probe_seed=0, platform=PLATFORM
        ).artifact
        for name in ("ppo_clip", "lpo")
    ]
    together = stages.evaluate_artifacts(DRIFT, artifacts, settings, references, [0, 0], PLATFORM)
    assert all(o.passed for o in together), [o.reason for o in together]
    assert counted == [LEVELS[0], LEVELS[0]]  # ... and the batch's: one for all three levels
    assert [[s.env for s in o.env_scores] for o in together] == [
        [LEVELS[0], *LEVELS]
    ] * 2  # the short run, then each level's full run
    alone = _settings(LEVELS[-1:])  # the last level, in a program compiled for it
    own = stages.evaluate_artifacts(DRIFT, artifacts, alone, _references(alone), [0, 0], PLATFORM)
    for mine, theirs in zip(together, own):
        assert _scores(mine)[-1] == _scores(theirs)[-1]


@pytest.mark.slow  # ~65 s: four LPG programs compiled
def test_lpg_agents_on_drawn_levels_share_programs_by_scan_length(monkeypatch):
    """The LPG evaluator's trainer builds one program per family, agent and scan length, not
    one per level; a level trained in a longer scan than its lifetime scores bit for bit as in
    a scan of exactly its lifetime (the agent is frozen after it)."""
    from metarl.evaluation import lpg_evaluation
    from metarl.rl.lpg import agent
    from metarl.rl.lpg.network import LPGShape, init_lpg, lpg_source

    assert [lpg_evaluation.scan_length(n, 250) for n in (10, 16, 17, 200, 250)] == [
        16,
        16,
        32,
        250,
        250,
    ]
    built = []

    def counting(config, *args):
        built.append(config.max_updates)
        return make(config, *args)

    make = agent.make_lpg_train
    monkeypatch.setattr(agent, "make_lpg_train", counting)
    shape = LPGShape()
    source = lpg_source(init_lpg(jax.random.PRNGKey(0), shape), shape, "a network")
    runs = [["train", LEVELS[0], 12], ["train", LEVELS[1], 15], ["train", LEVELS[2], 40]]
    job = {"source": source, "seeds": [0, 1], "num_envs": 4, "runs": runs}
    result = lpg_evaluation.train_lpg_job(job, lambda *a, **k: None)
    assert built == [16, 40]  # lifetimes 12 and 15 share the scan of 16; 40 is the longest
    alone = lpg_evaluation.train_lpg_job({**job, "runs": runs[1:2]}, lambda *a, **k: None)
    assert built == [16, 40, 15]  # alone, its scan is exactly its lifetime
    for field in ("returns", "reference", "random"):
        assert result["runs"][1][field] == alone["runs"][0][field]
