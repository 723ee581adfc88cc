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
