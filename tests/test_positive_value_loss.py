"""PLR's positive value loss, end to end: computed by the trainer from its own GAE advantages,
carried per seed in EnvRun, as a mean over seeds in EnvScore (strictly parsed from a worker's
message and re-scored by the parent), and stored in the archive's `evaluations` rows."""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import replace

import jax.numpy as jnp
import numpy as np
import pytest
from sqlite_utils import Database

from metarl.archives import SCHEMA_VERSION, Archive
from metarl.archives.schema import MIGRATIONS
from metarl.archives.store import decode_outcome
from metarl.evaluation.batch_training import verify_outcome
from metarl.evaluation.outcome import (
    MalformedResult,
    Outcome,
    env_score,
    parse_outcome,
    positive_value_loss_of,
)
from metarl.evaluation.references import baseline_reference
from metarl.evaluation.settings import CascadeSettings, Reference, plan_runs
from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.ppo import positive_value_loss
from metarl.rl.training import run_training

# 8 updates of 4 x 128 steps: the tail (last 10%) is the last update
TINY = default_config("CartPole-v1", total_timesteps=4096, num_log_points=4)


def test_positive_value_loss_is_the_mean_of_the_positive_part():
    advantages = jnp.asarray([[1.0, -2.0], [0.5, -0.25], [3.0, 0.0]], jnp.float32)
    expected = (1.0 + 0.5 + 3.0) / 6
    assert float(positive_value_loss(advantages)) == pytest.approx(expected)
    assert float(positive_value_loss(-jnp.abs(advantages))) == 0.0
    assert positive_value_loss(advantages).dtype == jnp.float32
    assert math.isnan(float(positive_value_loss(jnp.asarray([1.0, jnp.nan]))))


def test_ppo_reports_it_per_seed_and_the_score_takes_the_mean():
    run = run_training(TINY, Components(), seeds=[0, 1])
    values = run.positive_value_loss
    assert len(values) == 2
    assert all(v is not None and math.isfinite(v) and v >= 0.0 for v in values)
    assert values[0] > 0.0  # early CartPole: the critic still under-predicts some returns
    score = env_score(run.to_dict(), 20.0, 10.0, "train", "full")
    assert score.positive_value_loss == pytest.approx(float(np.mean(values)))


def _run(**extra) -> dict:
    return {
        "env": "CartPole-v1",
        "seeds": [0, 1],
        "total_timesteps": 1024,
        "final_returns": [100.0, 120.0],
        **extra,
    }


def test_env_score_reads_per_seed_values_or_their_mean_strictly():
    def score(value):
        return env_score(_run(positive_value_loss=value), 200.0, 0.0, "train", "full")

    assert score([0.25, 0.75]).positive_value_loss == pytest.approx(0.5)
    assert score(0.5).positive_value_loss == 0.5  # an EnvScore's mean, as the parent re-scores
    assert env_score(_run(), 200.0, 0.0, "train", "full").positive_value_loss is None  # absent
    for undefined in ([], [0.5, None], [0.5, math.nan], None, math.inf):
        assert score(undefined).positive_value_loss is None
    for bad in (["0.5", 0.5], [0.5], [0.5, 0.5, 0.5], "0.5", True, {"x": 1}, -0.1, [0.5, -1.0]):
        with pytest.raises(MalformedResult):
            score(bad)
    assert positive_value_loss_of([1.0], 1) == 1.0


def _outcome(value: float | None) -> Outcome:
    score = env_score(_run(positive_value_loss=value), 200.0, 0.0, "train", "full")
    return Outcome(True, "full", env_scores=[score], fitness=score.normalised)


def test_the_result_parser_accepts_a_number_or_none_and_rejects_anything_else():
    back = parse_outcome(_outcome(0.5).to_dict())
    assert back.env_scores[0].positive_value_loss == 0.5
    assert parse_outcome(_outcome(None).to_dict()).env_scores[0].positive_value_loss is None
    old = _outcome(0.5).to_dict()
    del old["env_scores"][0]["positive_value_loss"]  # a message from before the field
    assert parse_outcome(old).env_scores[0].positive_value_loss is None
    assert Outcome.from_dict(old).env_scores[0].positive_value_loss is None
    for bad in ("0.5", True, [0.5], {"mean": 0.5}, -1.0):
        message = _outcome(0.5).to_dict()
        message["env_scores"][0]["positive_value_loss"] = bad
        with pytest.raises(MalformedResult):
            parse_outcome(message)


def test_the_parent_keeps_it_when_it_rescores_a_worker_result():
    settings = CascadeSettings(suite="smoke", seeds=1, seed_values=[0])
    plan = plan_runs(settings)
    entry = plan[0]
    references = {e.key: Reference(200.0, 10.0, 1.0, {}) for e in plan}
    raw = {
        "env": entry.config.env_name,
        "seeds": [0],
        "total_timesteps": entry.steps,
        "final_returns": [150.0],
        "positive_value_loss": [0.3],
    }
    score = env_score(raw, 1.0, 0.0, entry.role, entry.stage)
    message = Outcome(False, "short", reason="stopped", env_scores=[score]).to_dict()
    verified = verify_outcome(parse_outcome(message), plan, references, settings)
    assert verified.env_scores[0].positive_value_loss == pytest.approx(0.3)
    assert verified.env_scores[0].normalised == pytest.approx((150.0 - 10.0) / 190.0)


def test_a_baseline_reference_holds_each_seeds_value_even_from_an_older_cache():
    runs = [
        {"seeds": [0], "final_returns": [10.0], "curve": [1.0], "positive_value_loss": [0.2]},
        {"seeds": [1], "final_returns": [12.0], "curve": [2.0]},  # cached before the field
    ]
    reference = baseline_reference(runs, 0.0)
    assert reference.run["positive_value_loss"] == [0.2, None]


def _candidate_row(run_id: str) -> dict:
    return {
        "id": f"{run_id}-0",
        "run_id": run_id,
        "seq": 0,
        "task": "drift",
        "suite": "smoke",
        "hash": "h0",
        "code": "def drift(ratio, advantage, epsilon):\n    return 0 * ratio\n",
        "seeds": [0, 1],
        "eval_key": "k",
    }


def test_an_outcome_with_it_survives_the_archive_round_trip(tmp_path):
    outcome = _outcome(0.5)
    undefined = replace(outcome.env_scores[0], env="Acrobot-v1", positive_value_loss=None)
    outcome.env_scores.append(undefined)
    with Archive(tmp_path / "a.db") as archive:
        run_id = archive.create_run(task="drift", suite="smoke")
        archive.record_candidate(_candidate_row(run_id), outcome)
        rows = archive.evaluations(f"{run_id}-0")
        assert [r["positive_value_loss"] for r in rows] == [0.5, None]
        back = decode_outcome(archive.candidate(f"{run_id}-0"))
    assert [s.positive_value_loss for s in back.env_scores] == [0.5, None]


def test_an_archive_from_version_6_migrates_and_reads(tmp_path):
    path = tmp_path / "old.db"
    db = Database(sqlite3.connect(path))
    for migration in MIGRATIONS[:6]:
        migration(db)
    old = _outcome(0.5).to_dict()
    del old["env_scores"][0]["positive_value_loss"]  # as version 6 wrote it
    db["candidates"].insert(
        {**_candidate_row("old"), "seeds": "[0, 1]", "status": "passed", "outcome": json.dumps(old)}
    )
    db["evaluations"].insert({"candidate_id": "old-0", "env": "CartPole-v1", "mean": 110.0})
    db.execute("PRAGMA user_version = 6")
    db.conn.commit()
    db.conn.close()
    with Archive(path) as archive:
        assert archive.schema_version == SCHEMA_VERSION
        (row,) = archive.evaluations("old-0")
        assert row["positive_value_loss"] is None and row["mean"] == 110.0
        assert decode_outcome(archive.candidate("old-0")).env_scores[0].positive_value_loss is None
        run_id = archive.create_run(task="drift", suite="smoke")
        archive.record_candidate(_candidate_row(run_id), _outcome(0.25))
        (new,) = archive.evaluations(f"{run_id}-0")
        assert new["positive_value_loss"] == 0.25
