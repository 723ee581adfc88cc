"""Evaluation protocols (evaluation/protocols.py): a name that fills a run's defaults, is
overridden by explicit options, and is recorded with the run and shown with its scores."""

from __future__ import annotations

import pytest
from role_evaluator import RoleEvaluator

from metarl.archives import Archive
from metarl.archives.queries import leaderboard
from metarl.discovery.config import ConfigError, DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.evaluation.protocols import PROTOCOLS


def test_the_default_protocol_is_todays_demo():
    config = DiscoverConfig().resolved()
    assert config.protocol == "quick"
    assert (config.suite, config.timesteps, config.seeds) == ("classic", 100_000, 2)
    assert (config.confirm_seeds, config.race_seeds, config.lr_sweep) == (4, 12, None)


def test_discover_and_evaluate_train_a_suite_with_the_same_budget():
    from metarl.evaluation.settings import CascadeSettings, plan_runs
    from metarl.rl.suites import get_suite

    for suite in ("smoke", "grid-small", "minatar"):
        evaluated = {p.config.total_timesteps for p in plan_runs(CascadeSettings(suite=suite))}
        assert evaluated == {get_suite(suite).total_timesteps}
        assert DiscoverConfig(suite=suite).resolved().timesteps == get_suite(suite).total_timesteps
    # the protocol's budget is its own suite's; an explicit budget is the user's
    assert DiscoverConfig(suite="classic").resolved().timesteps == 100_000
    assert DiscoverConfig(suite="smoke", timesteps=8192).resolved().timesteps == 8192
    assert DiscoverConfig(suite="classic", timesteps=0).resolved().timesteps == 500_000


def test_discobench_fills_the_defaults_and_explicit_options_override_it():
    config = DiscoverConfig(protocol="discobench").resolved()
    assert (config.suite, config.timesteps, config.seeds) == ("discobench", 10_000_000, 8)
    assert (config.race_seeds, config.lr_aggregation) == (32, "best")
    assert config.lr_sweep == PROTOCOLS["discobench"].settings["lr_sweep"]  # DiscoGen's 10 rates
    mine = DiscoverConfig(protocol="discobench", seeds=16, lr_aggregation="mean").resolved()
    assert (mine.seeds, mine.lr_aggregation, mine.suite) == (16, "mean", "discobench")


def test_minatar_cpu_is_discobenchs_games_at_a_cpu_budget_with_rungs():
    config = DiscoverConfig(protocol="minatar-cpu").resolved()
    assert (config.suite, config.timesteps, config.short_timesteps) == (
        "discobench",
        1_000_000,
        250_000,
    )
    assert (config.seeds, config.confirm_seeds, config.race_seeds) == (2, 4, 8)
    assert config.fidelity == "rungs" and config.lr_sweep is None
    assert DiscoverConfig(protocol="minatar-cpu", fidelity="full").resolved().fidelity == "full"


def test_minatar_cpu_gives_a_stage_an_hour_and_a_stability_round_its_factor_more():
    from metarl.discovery.records import cascade_settings

    config = DiscoverConfig(protocol="minatar-cpu").resolved()
    assert config.timeout == 3600.0  # a validation round's programs: ~440 s quiet, 2-3x busy
    assert config.stability == 0.0  # a race round is ~13 min cold: no 2x round unless asked
    assert cascade_settings(config, "confirm", None).timeout_s == 3600.0
    asked = DiscoverConfig(protocol="minatar-cpu", stability=2.0).resolved()
    stability = cascade_settings(asked, "stability", None)
    assert (stability.total_timesteps, stability.timeout_s) == (2_000_000, 7200.0)
    assert DiscoverConfig().resolved().timeout == 900.0  # the demo keeps the default


def test_a_baseline_job_gets_one_timeout_per_half_a_million_steps_and_per_env():
    from metarl.evaluation.settings import CascadeSettings, plan_runs

    def limit(suite, timesteps, seeds, timeout=900.0):
        settings = CascadeSettings(
            suite=suite, total_timesteps=timesteps, timeout_s=timeout, validation=True
        )
        segments = [p for p in plan_runs(settings) if p.role == "validation" and p.stage == "full"]
        return settings.baseline_limit(segments, seeds)

    # a race round at minatar-cpu's scale: Seaquest, 4 seeds x 1e6 steps (~2,000 s of gymnax's
    # Seaquest on 2 busy cores) = 8 units of 900 s
    assert limit("discobench", 1_000_000, 4) == 7200.0
    assert limit("discobench", 2_000_000, 4) == 14400.0  # a stability round at 2x
    # small work keeps a whole timeout (at least 10 minutes) per env, as before
    assert limit("discobench", 100_000, 2) == 900.0
    assert limit("discobench", 100_000, 2, timeout=60.0) == 600.0


def test_an_unknown_protocol_is_one_clear_error():
    with pytest.raises(ConfigError, match="unknown protocol 'atari'.*quick, minatar-cpu"):
        DiscoverConfig(protocol="atari").resolved()


def test_every_protocol_sets_only_options_a_run_has():
    fields = set(DiscoverConfig().to_dict())
    for protocol in PROTOCOLS.values():
        assert set(protocol.settings) <= fields, protocol.name
        assert protocol.description


def test_a_run_records_its_protocol_and_the_leaderboard_shows_it(tmp_path):
    log = []
    config = DiscoverConfig(
        suite="smoke", timesteps=8192, seeds=1, seed_values=[0], budget=0, max_time=None
    )
    with Archive(tmp_path / "a.db") as archive:
        loop = DiscoveryLoop(
            archive,
            config,
            MutationProposer(),
            evaluator_factory=lambda settings, workers: RoleEvaluator(settings, log),
        )
        result = loop.run()
        assert archive.get_run(result.run_id)["protocol"] == "quick"
        rows = leaderboard(archive, run_id=result.run_id).rows
        assert rows and {row.protocol for row in rows} == {"quick"}
