"""Normalised scores and the baseline cache."""

import json
import math

import pytest

from metarl.evaluation import baseline_cache
from metarl.rl.configs import default_config
from metarl.rl.scoring import aggregate, interquartile_mean, normalised_score


def test_normalised_score_arithmetic():
    assert normalised_score(500.0, 20.0, 500.0) == pytest.approx(1.0)
    assert normalised_score(20.0, 20.0, 500.0) == pytest.approx(0.0)
    assert normalised_score(260.0, 20.0, 500.0) == pytest.approx(0.5)
    assert normalised_score(740.0, 20.0, 500.0) == pytest.approx(1.5)
    # negative-reward environments (Acrobot): less negative is better
    assert normalised_score(-100.0, -500.0, -100.0) == pytest.approx(1.0)
    assert normalised_score(-300.0, -500.0, -100.0) == pytest.approx(0.5)
    # worse than random is negative, not clipped
    assert normalised_score(-500.0, -400.0, -100.0) == pytest.approx(-1 / 3)


def test_undefined_scores_are_nan_not_numbers():
    assert math.isnan(normalised_score(10.0, 5.0, 5.0))  # baseline no better than random
    assert math.isnan(normalised_score(float("nan"), 5.0, 50.0))


def test_aggregates():
    assert aggregate([1.0, 0.5]) == pytest.approx(0.75)
    assert aggregate([1.0, float("nan")]) == pytest.approx(1.0)
    assert math.isnan(aggregate([float("nan")]))
    assert interquartile_mean([0.0, 1.0, 1.0, 100.0]) == pytest.approx(1.0)
    assert aggregate([0.0, 1.0, 1.0, 100.0], "iqm") == pytest.approx(1.0)
    with pytest.raises(ValueError):
        aggregate([1.0], "median")


def test_baseline_cache_keys_on_everything_that_changes_a_baseline(tmp_path, monkeypatch):
    monkeypatch.setenv("METARL_CACHE_DIR", str(tmp_path))
    config = default_config("CartPole-v1", total_timesteps=2048, num_log_points=2)
    source_hash = "x"
    keys = {
        baseline_cache.baseline_key("drift", source_hash, config, [0]),
        baseline_cache.baseline_key("drift", source_hash, config, [0, 1]),
        baseline_cache.baseline_key(
            "drift", source_hash, config.replace(total_timesteps=4096), [0]
        ),
        baseline_cache.baseline_key("optimizer", source_hash, config, [0]),
        baseline_cache.baseline_key("drift", "y", config, [0]),
    }
    assert len(keys) == 5
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=false")
    assert baseline_cache.baseline_key("drift", source_hash, config, [0]) not in keys


def test_cache_entries_round_trip_and_are_verified_on_read(tmp_path, monkeypatch):
    monkeypatch.setenv("METARL_CACHE_DIR", str(tmp_path))
    data = {"env": "CartPole-v1", "final_returns": [12.5, 30.0], "curve": [1.0]}
    baseline_cache.save("baseline-k", data)
    assert baseline_cache.load("baseline-k") == data
    (entry,) = (tmp_path / "baselines").glob("*.json")
    # a hand-edited number, a corrupt file, a file under another key: never trusted
    tampered = json.loads(entry.read_text())
    tampered["data"]["final_returns"] = [325.6, 325.6]
    entry.write_text(json.dumps(tampered))
    assert baseline_cache.load("baseline-k") is None
    entry.write_text("{not json")
    assert baseline_cache.load("baseline-k") is None
    baseline_cache.save("baseline-other", data)
    (tmp_path / "baselines" / "baseline-other.json").rename(entry)
    assert baseline_cache.load("baseline-k") is None
    baseline_cache.save("random-k", {"env": "CartPole-v1", "return": float("nan")})
    assert baseline_cache.load("random-k") is None  # a score is never normalised by NaN
