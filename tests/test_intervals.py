"""Bootstrap intervals and published references as the archive stores them and the CLI shows
them: a candidate recorded directly (no training) with scores built from plain numbers."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest
from conftest import invoke

from metarl.archives import SCHEMA_VERSION, Archive
from metarl.archives.queries import leaderboard
from metarl.evaluation.outcome import Outcome, env_score
from metarl.evaluation.roles import aggregate_intervals
from metarl.rl.scoring import aggregate

pytestmark = pytest.mark.usefixtures("restore_logging")


def _score(env: str, returns: list[float], baseline: float, random: float, heldout=False):
    run = {
        "env": env,
        "seeds": list(range(len(returns))),
        "total_timesteps": 8192,
        "final_returns": returns,
    }
    return env_score(run, baseline, random, "test" if heldout else "train", "full")


def _minatar_outcome() -> Outcome:
    scores = [
        _score("Breakout-MinAtar", [40.0, 52.0, 47.0, 45.0], 46.0, 1.0),
        _score("Freeway-MinAtar", [58.0, 60.0, 61.0, 57.0], 60.0, 0.0),
        _score("Asterix-MinAtar", [12.0, 16.0, 14.0, 13.0], 14.0, 0.5, heldout=True),
        _score("SpaceInvaders-MinAtar", [150.0, 170.0, 160.0, 165.0], 160.0, 3.0, heldout=True),
    ]
    fitness_ci, heldout_ci = aggregate_intervals(scores)
    return Outcome(
        True,
        "full",
        env_scores=scores,
        fitness=aggregate([s.normalised for s in scores[:2]]),
        heldout=aggregate([s.normalised for s in scores[2:]]),
        fitness_ci=fitness_ci,
        heldout_ci=heldout_ci,
    )


@pytest.fixture
def archive_path(tmp_path):
    path = tmp_path / "a.db"
    with Archive(path) as archive:
        run = archive.create_run(task="drift", suite="minatar", proposer="mutation")
        archive.record_candidate(
            {
                "id": "r1-0",
                "run_id": run,
                "seq": 0,
                "task": "drift",
                "suite": "minatar",
                "hash": "abcd1234",
                "name": "ppo_clip",
                "code": "def drift(ratio, advantage, epsilon):\n    return ratio * 0\n",
                "seeds": [0, 1, 2, 3],
                "total_timesteps": 8192,
                "eval_key": "k",
                "generation": 0,
                "is_seed": 1,
                "proposer": "seed",
                "parent_ids": [],
            },
            _minatar_outcome(),
        )
        archive.record_confirmation("r1-0", _minatar_outcome(), run_id=run)
    return str(path)


def test_archive_stores_the_intervals(archive_path):
    outcome = _minatar_outcome()
    with Archive(archive_path, must_exist=True) as archive:
        assert archive.schema_version == SCHEMA_VERSION
        row = archive.candidate("r1-0")
        assert [row["fitness_low"], row["fitness_high"]] == outcome.fitness_ci
        assert [row["heldout_low"], row["heldout_high"]] == outcome.heldout_ci
        assert row["fitness_low"] < row["fitness"] < row["fitness_high"]
        assert row["confirmed_fitness_low"] == row["fitness_low"]
        (entry,) = leaderboard(archive, run_id="r1").rows
        assert entry.fitness_ci == outcome.fitness_ci and entry.heldout_ci == outcome.heldout_ci
        evaluation = archive.evaluations("r1-0")[0]
        assert evaluation["normalised_low"] < evaluation["normalised"]
        assert evaluation["normalised"] < evaluation["normalised_high"]
        assert set(evaluation["published"]) == {
            "learn-rl-algorithms",
            "DiscoBench",
            "DiscoGen 1.3.0",
        }


def test_leaderboard_show_and_export_print_the_intervals(archive_path):
    outcome = _minatar_outcome()
    low, high = outcome.fitness_ci
    result = invoke("leaderboard", "--archive", archive_path)
    assert result.exit_code == 0, result.output
    assert f"{outcome.fitness:.2f} [{low:.2f}, {high:.2f}]" in result.stdout
    result = invoke("leaderboard", "--archive", archive_path, "--json")
    (row,) = json.loads(result.stdout)
    assert row["fitness_ci"] == [low, high] and row["heldout_ci"] == outcome.heldout_ci
    result = invoke("show", "r1-0", "--archive", archive_path)
    assert result.exit_code == 0, result.output
    assert f"{outcome.fitness:.3f} [{low:.3f}, {high:.3f}]" in result.stdout
    breakout = outcome.env_scores[0]
    low_env, high_env = breakout.normalised_ci
    assert f"{breakout.normalised:.2f} [{low_env:.2f}, {high_env:.2f}]" in result.stdout
    assert "vs published PPO" in result.stdout
    assert "learn-rl-algorithms" in result.stdout and "DiscoBench" in result.stdout
    assert f"{breakout.published['DiscoBench']:.3f}" in result.stdout
    data = json.loads(invoke("export", "r1", "--archive", archive_path).stdout)
    (candidate,) = data["candidates"]
    assert candidate["fitness_low"] == low and candidate["heldout_high"] == outcome.heldout_ci[1]
    assert candidate["evaluations"][0]["published"]["DiscoBench"] == pytest.approx(
        breakout.published["DiscoBench"]
    )
    text = invoke("export", "r1", "--format", "csv", "--archive", archive_path).stdout
    (flat,) = csv.DictReader(io.StringIO(text))
    assert float(flat["fitness_low"]) == pytest.approx(low)
    assert float(flat["score:Breakout-MinAtar:high"]) == pytest.approx(breakout.normalised_ci[1])


def test_an_archive_written_before_intervals_migrates_and_shows(archive_path):
    # back to schema 1: the interval columns exist but are empty, as after the migration of an
    # old archive; the read commands show the bare scores
    conn = sqlite3.connect(archive_path)
    conn.execute(
        "UPDATE candidates SET fitness_low = NULL, fitness_high = NULL, heldout_low = NULL, "
        "heldout_high = NULL, confirmed_fitness_low = NULL, confirmed_fitness_high = NULL, "
        "confirmed_heldout_low = NULL, confirmed_heldout_high = NULL"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    result = invoke("leaderboard", "--archive", archive_path, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)[0]["fitness_ci"] is None
    assert invoke("show", "r1-0", "--archive", archive_path).exit_code == 0
    with Archive(archive_path, must_exist=True) as archive:
        assert archive.schema_version == SCHEMA_VERSION
