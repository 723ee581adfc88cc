"""Normalised scores and the baseline cache."""

import json
import math

import numpy as np
import pytest

from metarl.evaluation import baseline_cache
from metarl.evaluation.outcome import (
    MalformedResult,
    Outcome,
    env_score,
    parse_outcome,
)
from metarl.evaluation.roles import aggregate_intervals
from metarl.rl.configs import default_config
from metarl.rl.scoring import (
    aggregate,
    bootstrap_interval,
    interquartile_mean,
    normalised_score,
    per_seed_normalised,
)
from metarl.rl.suites import REFERENCE_SOURCES, get_suite, published_returns


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
    full = config.num_updates
    keys = {
        baseline_cache.baseline_key("drift", source_hash, config, 0, full),
        baseline_cache.baseline_key("drift", source_hash, config, 1, full),  # another seed
        baseline_cache.baseline_key(
            "drift", source_hash, config.replace(total_timesteps=4096), 0, full
        ),
        baseline_cache.baseline_key("optimizer", source_hash, config, 0, full),
        baseline_cache.baseline_key("drift", "y", config, 0, full),
        # the short run: the first segment of the same run
        baseline_cache.baseline_key("drift", source_hash, config, 0, full // 2),
        # the layout it was trained in: the batch's seeds, in order
        baseline_cache.baseline_key("drift", source_hash, config, 0, full, (), (0, 1)),
        baseline_cache.baseline_key("drift", source_hash, config, 0, full, (), (1, 0)),
    }
    assert len(keys) == 8
    assert baseline_cache.baseline_key(
        "drift", source_hash, config, 0, full, (), (0,)
    ) == baseline_cache.baseline_key("drift", source_hash, config, 0, full)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=false")
    assert baseline_cache.baseline_key("drift", source_hash, config, 0, full) not in keys


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


def _run(env: str, returns: list[float]) -> dict:
    seeds = list(range(len(returns)))
    return {"env": env, "seeds": seeds, "total_timesteps": 1024, "final_returns": returns}


def test_bootstrap_interval_contains_the_mean_narrows_with_seeds_and_is_reproducible():
    rng = np.random.default_rng(1)
    widths = []
    for n in (4, 16, 64, 256):
        values = rng.normal(1.0, 0.3, size=n)
        low, high = bootstrap_interval([values])
        assert low <= values.mean() <= high
        assert bootstrap_interval([values]) == (low, high)  # fixed RNG: same numbers, same CI
        widths.append(high - low)
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0] / 4
    # no spread to estimate from one seed, or a non-finite value: no interval
    assert bootstrap_interval([[0.7]]) is None and bootstrap_interval([]) is None
    assert bootstrap_interval([[0.7, math.nan]]) is None


def test_bootstrap_resamples_seeds_jointly_across_envs():
    # two envs whose seeds are perfectly anti-correlated: seed i of both together averages to
    # exactly 1, so the joint interval has no width; resampling envs independently would
    good = [0.0, 2.0, 0.5, 1.5]
    bad = [2.0, 0.0, 1.5, 0.5]
    low, high = bootstrap_interval([good, bad])
    assert low == pytest.approx(1.0) and high == pytest.approx(1.0)
    low, high = bootstrap_interval([good, [1.0, 1.0, 1.0]])  # seed counts differ: independent
    assert low < 1.0 < high


def test_env_score_interval_is_of_the_normalised_score():
    score = env_score(
        _run("CartPole-v1", [100.0, 300.0, 200.0, 250.0]), 200.0, 0.0, "train", "full"
    )
    assert score.normalised == pytest.approx(1.0625)
    low, high = score.normalised_ci
    assert low < score.normalised < high
    per_seed = per_seed_normalised(score.returns, 0.0, 200.0)
    assert list(bootstrap_interval([per_seed])) == score.normalised_ci  # from the archive row
    assert score.published == {}  # CartPole has no published references
    one = env_score(_run("CartPole-v1", [100.0]), 200.0, 0.0, "train", "full")
    assert one.normalised == pytest.approx(0.5) and one.normalised_ci is None
    flat = env_score(_run("CartPole-v1", [100.0, 300.0]), 10.0, 10.0, "train", "full")
    assert flat.normalised is None and flat.normalised_ci is None


def test_fitness_and_heldout_intervals_from_env_scores():
    scores = [
        env_score(_run("CartPole-v1", [180.0, 220.0, 200.0]), 200.0, 0.0, "train", "full"),
        env_score(_run("Acrobot-v1", [-100.0, -120.0, -80.0]), -100.0, -500.0, "train", "full"),
        env_score(_run("CartPole-v1", [50.0, 60.0, 70.0]), 200.0, 0.0, "train", "short"),
        env_score(_run("Catch-bsuite", [0.5, 0.7, 0.6]), 0.6, -0.6, "test", "full"),
    ]
    fitness = aggregate([s.normalised for s in scores[:2]])
    fitness_ci, heldout_ci = aggregate_intervals(scores)
    assert fitness_ci[0] < fitness < fitness_ci[1]
    assert heldout_ci[0] < scores[3].normalised < heldout_ci[1]
    assert aggregate_intervals(scores[:2])[1] is None  # no held-out env
    # round trip through a worker message: the parser accepts them, and only well-formed ones
    outcome = Outcome(True, "full", env_scores=scores, fitness=fitness, fitness_ci=fitness_ci)
    back = parse_outcome(outcome.to_dict())
    assert back.fitness_ci == fitness_ci and back.env_scores[0].normalised_ci is not None
    for bad in ([1.0], [2.0, 1.0], [0.0, "1"], "x", [0.0, math.inf]):
        with pytest.raises(MalformedResult):
            parse_outcome({**outcome.to_dict(), "fitness_ci": bad})
    message = outcome.to_dict()
    message["env_scores"][0]["published"] = {"x": "high"}
    with pytest.raises(MalformedResult):
        parse_outcome(message)
    # an outcome archived before intervals existed still reads
    old = outcome.to_dict()
    del old["fitness_ci"], old["heldout_ci"]
    for env in old["env_scores"]:
        del env["normalised_ci"], env["published"]
    assert Outcome.from_dict(old).fitness_ci is None
    assert parse_outcome(old).env_scores[0].published == {}


def test_minatar_split_and_published_references():
    suite = get_suite("minatar")
    assert suite.envs == ("Breakout-MinAtar", "Freeway-MinAtar")
    assert suite.heldout == ("Asterix-MinAtar", "SpaceInvaders-MinAtar")
    assert set(suite.published) == {"learn-rl-algorithms", "DiscoBench", "DiscoGen 1.3.0"}
    assert set(REFERENCE_SOURCES) == set(suite.published)  # every label names its source
    for returns in suite.published.values():
        assert set(returns) == set(suite.envs + suite.heldout)
    assert published_returns("Breakout-MinAtar") == {
        "learn-rl-algorithms": 50.08,
        "DiscoBench": 69.91,
        "DiscoGen 1.3.0": 59.52,
    }
    assert published_returns("CartPole-v1") == {}
    # normalised against each published return: (R - R_random) / (R_ref - R_random)
    score = env_score(_run("Breakout-MinAtar", [45.0, 50.0]), 40.0, 1.0, "train", "full")
    assert score.published["learn-rl-algorithms"] == pytest.approx((47.5 - 1.0) / (50.08 - 1.0))
    assert score.published["DiscoBench"] == pytest.approx((47.5 - 1.0) / (69.91 - 1.0))
