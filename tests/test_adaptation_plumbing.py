"""A meta-RL run's adaptation curve and its from-scratch PPO reference (`scratch`), end to end:
summarised per seed into EnvRun from a vmapped result, carried per seed through a baseline
reference, parsed strictly into EnvScore's mean curves (a worker's message is hostile), stored in
the archive's `evaluations.adaptation` and `evaluations.scratch` (schema version 8), drawn in
the report and shown by `metarl show`; a run without one (PPO) shows no adaptation section."""

from __future__ import annotations

import json
import math
import sqlite3
from typing import NamedTuple

import numpy as np
import pytest
from conftest import invoke
from report_pages import rows, sections
from sqlite_utils import Database

from metarl.archives import SCHEMA_VERSION, Archive
from metarl.archives.schema import MIGRATIONS
from metarl.archives.store import decode_outcome
from metarl.cli.candidate import _adaptation_cell
from metarl.evaluation.batch_training import verify_outcome
from metarl.evaluation.outcome import (
    MAX_ADAPTATION_POINTS,
    EnvScore,
    MalformedResult,
    Outcome,
    curve_of,
    env_score,
    parse_outcome,
)
from metarl.evaluation.references import baseline_reference
from metarl.evaluation.settings import CascadeSettings, Reference, plan_runs
from metarl.report.adaptation import (
    SCRATCH_LABEL,
    AdaptationCurve,
    adaptation_figure,
    significant,
    x_label,
)
from metarl.report.page import write_report
from metarl.rl.configs import default_config
from metarl.rl.training import EnvRun, summarise
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash

CONFIG = default_config("CartPole-v1", total_timesteps=4096, num_log_points=4)


class FakeResult(NamedTuple):
    """The fields `summarise` reads of a vmapped TrainResult (2 seeds, 4 log points)."""

    episode_return: np.ndarray
    steps: np.ndarray
    final_return: np.ndarray
    first_nonfinite_update: np.ndarray
    first_negative_drift_update: np.ndarray
    min_drift: np.ndarray
    positive_value_loss: np.ndarray
    adaptation: np.ndarray | None = None
    scratch: np.ndarray | None = None


def _result(adaptation=None, scratch=None) -> FakeResult:
    steps = np.tile(np.arange(1, 5) * CONFIG.batch_size, (2, 1))
    return FakeResult(
        episode_return=np.array([[1.0, 2.0, 3.0, 4.0], [3.0, 4.0, 5.0, 6.0]]),
        steps=steps,
        final_return=np.array([4.0, 6.0]),
        first_nonfinite_update=np.array([-1, -1]),
        first_negative_drift_update=np.array([-1, -1]),
        min_drift=np.array([0.0, 0.0]),
        positive_value_loss=np.array([0.1, 0.2]),
        adaptation=adaptation,
        scratch=scratch,
    )


def test_summarise_keeps_each_seeds_adaptation_curve_and_its_mean():
    curves = np.array([[1.0, 2.0, np.nan], [3.0, 6.0, np.inf]], np.float32)
    run = summarise(CONFIG, [0, 1], _result(curves), 4, 1.0, 2.0)
    assert run.adaptation == [[1.0, 2.0, None], [3.0, 6.0, None]]
    assert run.adaptation_mean == [2.0, 4.0, None]
    assert run.to_dict()["adaptation"] == run.adaptation
    score = env_score(run.to_dict(), 10.0, 0.0, "test", "full")
    assert score.adaptation == [2.0, 4.0, None]
    assert run.scratch == [] and run.scratch_mean == [] and score.scratch is None


def test_summarise_keeps_each_seeds_scratch_curve_beside_the_adaptation_curve():
    curves = np.array([[1.0, 2.0, 3.0], [3.0, 6.0, 9.0]], np.float32)
    scratch = np.array([[1.0, 1.5, np.nan], [3.0, 2.5, np.nan]], np.float32)
    run = summarise(CONFIG, [0, 1], _result(curves, scratch), 4, 1.0, 2.0)
    assert run.scratch == [[1.0, 1.5, None], [3.0, 2.5, None]]
    assert run.scratch_mean == [2.0, 2.0, None]
    assert run.adaptation_mean == [2.0, 4.0, 6.0]
    assert run.to_dict()["scratch"] == run.scratch
    score = env_score(run.to_dict(), 10.0, 0.0, "test", "full")
    assert (score.adaptation, score.scratch) == ([2.0, 4.0, 6.0], [2.0, 2.0, None])
    with pytest.raises(ValueError, match="scratch must be shaped"):
        summarise(CONFIG, [0, 1], _result(curves, np.zeros(3)), 4, 1.0, 2.0)


def test_a_run_without_an_adaptation_curve_has_none():
    for result in (_result(None), _result()._replace(adaptation=None)):
        run = summarise(CONFIG, [0, 1], result, 4, 1.0, 2.0)
        assert run.adaptation == [] and run.adaptation_mean == []

    class Older(NamedTuple):  # a TrainResult without the field at all (before it existed)
        episode_return: np.ndarray
        steps: np.ndarray
        final_return: np.ndarray
        first_nonfinite_update: np.ndarray
        first_negative_drift_update: np.ndarray
        min_drift: np.ndarray
        positive_value_loss: np.ndarray

    run = summarise(CONFIG, [0, 1], Older(*_result()[:7]), 4, 1.0, 2.0)
    assert run.adaptation == []
    assert env_score(run.to_dict(), 10.0, 0.0, "test", "full").adaptation is None
    with pytest.raises(ValueError, match="seeds, points"):
        summarise(CONFIG, [0, 1], _result(np.zeros(3)), 4, 1.0, 2.0)


def test_a_baseline_reference_holds_one_curve_per_seed_even_from_an_older_cache():
    common = {"env": "Meta-rl2/CartPole-v1", "total_timesteps": 8, "curve_steps": [8]}
    runs = [
        {
            **common,
            "seeds": [0],
            "final_returns": [1.0],
            "curve": [1.0],
            "adaptation": [[1.0, 2.0]],
            "scratch": [[0.5, 1.0]],
        },
        {**common, "seeds": [1], "final_returns": [2.0], "curve": [2.0]},  # cached before it
        {
            **common,
            "seeds": [2],
            "final_returns": [3.0],
            "curve": [3.0],
            "adaptation": [[3, None]],
            "scratch": [[1.5, math.nan]],
        },
    ]
    reference = baseline_reference(runs, 0.0)
    assert reference.run["adaptation"] == [[1.0, 2.0], [None, None], [3.0, None]]
    assert reference.run["scratch"] == [[0.5, 1.0], [None, None], [1.5, None]]
    assert EnvRun(**reference.run).adaptation_mean == [2.0, 2.0]
    assert EnvRun(**reference.run).scratch_mean == [1.0, 1.0]
    plain = [{k: v for k, v in r.items() if k not in ("adaptation", "scratch")} for r in runs]
    assert baseline_reference(plain, 0.0).run["adaptation"] == []
    assert baseline_reference(plain, 0.0).run["scratch"] == []


def _run(**extra) -> dict:
    return {
        "env": "Meta-rl2/CartPole-v1",
        "seeds": [0, 1],
        "total_timesteps": 1024,
        "final_returns": [100.0, 120.0],
        **extra,
    }


def _scored(value) -> EnvScore:
    return env_score(_run(adaptation=value), 200.0, 0.0, "test", "full")


def test_a_good_curve_is_read_per_seed_or_as_its_mean():
    assert _scored([[1.0, 2.0, 3.0], [3.0, 4, None]]).adaptation == [2.0, 3.0, 3.0]
    assert _scored([[1.0, None]]).adaptation == [1.0, None]  # fewer curves than seeds
    assert _scored([1.0, None, 5]).adaptation == [1.0, None, 5.0]  # a score's mean
    assert _scored([[1.0] * MAX_ADAPTATION_POINTS] * 2).adaptation == [1.0] * 64
    for absent in (None, []):
        assert _scored(absent).adaptation is None
    assert env_score(_run(), 200.0, 0.0, "test", "full").adaptation is None


@pytest.mark.parametrize(
    "bad",
    [
        [1.0] * (MAX_ADAPTATION_POINTS + 1),  # too long
        [[1.0] * (MAX_ADAPTATION_POINTS + 1)] * 2,
        ["1.0", 2.0],  # strings
        "[1.0, 2.0]",
        [[1.0, "2"], [1.0, 2.0]],
        [True, 1.0],  # not numbers
        [{"mean": 1.0}],
        1.5,
        {"0": [1.0]},
        [[[1.0]], [[2.0]]],  # nested garbage
        [[1.0, 2.0], 3.0],
        [[1.0, 2.0], None],
        [[]],
        [[1.0, 2.0], [1.0]],  # unequal per-seed lengths
        [[1.0], [2.0], [3.0]],  # more curves than seeds
        [1.0, math.nan],  # not finite
        [[1.0, math.inf], [1.0, 2.0]],
    ],
)
def test_anything_else_is_a_malformed_result(bad):
    with pytest.raises(MalformedResult, match="adaptation"):
        _scored(bad)
    # the same rules for the from-scratch reference
    good = [[1.0, 2.0]] * 2
    with pytest.raises(MalformedResult, match="scratch"):
        env_score(_run(adaptation=good, scratch=bad), 200.0, 0.0, "test", "full")
    with pytest.raises(MalformedResult, match="scratch"):
        env_score(_run(scratch=bad), 200.0, 0.0, "test", "full")


def test_a_scratch_curve_is_read_as_the_adaptation_curve_and_must_match_its_points():
    run = _run(
        adaptation=[[1.0, 2.0, 3.0], [3.0, 4, None]], scratch=[[1.0, 1.0, 2.0], [1, None, 4]]
    )
    score = env_score(run, 200.0, 0.0, "test", "full")
    assert (score.adaptation, score.scratch) == ([2.0, 3.0, 3.0], [1.0, 1.0, 3.0])
    mean = env_score(_run(adaptation=[1.0, 2.0], scratch=[0.5, None]), 200.0, 0.0, "test", "full")
    assert mean.scratch == [0.5, None]
    for absent in (None, []):
        assert (
            env_score(_run(adaptation=[1.0], scratch=absent), 1.0, 0.0, "test", "full").scratch
            is None
        )
    # scratch without an adaptation curve is read alone
    assert env_score(_run(scratch=[1.0, 2.0]), 1.0, 0.0, "test", "full").scratch == [1.0, 2.0]
    for adaptation, scratch in (
        ([[1.0, 2.0]] * 2, [[1.0, 2.0, 3.0]] * 2),
        ([1.0, 2.0], [1.0]),
        ([[1.0, 2.0]], [1.0, 2.0, 3.0]),
    ):
        with pytest.raises(MalformedResult, match="scratch has"):
            env_score(_run(adaptation=adaptation, scratch=scratch), 1.0, 0.0, "test", "full")


def _outcome(curve, scratch=None) -> Outcome:
    score = EnvScore(
        env="Meta-rl2/CartPole-v1",
        seeds=[0, 1],
        total_timesteps=1024,
        returns=[1.0, 2.0],
        mean=1.5,
        std=0.5,
        normalised=0.5,
        baseline_mean=2.0,
        random_mean=1.0,
        role="test",
        adaptation=curve,
        scratch=scratch,
    )
    return Outcome(True, "full", env_scores=[score], fitness=0.5)


def test_the_result_parser_takes_a_mean_curve_and_rejects_per_seed_curves_or_garbage():
    assert parse_outcome(_outcome([1.0, None, 3.0]).to_dict()).env_scores[0].adaptation == [
        1.0,
        None,
        3.0,
    ]
    assert parse_outcome(_outcome(None).to_dict()).env_scores[0].adaptation is None
    old = _outcome([1.0]).to_dict()
    del old["env_scores"][0]["adaptation"]  # a message from before the field
    assert parse_outcome(old).env_scores[0].adaptation is None
    assert Outcome.from_dict(old).env_scores[0].adaptation is None
    for bad in ([[1.0], [2.0]], [1.0] * 65, ["x"], "1,2", [None, [1.0]], True):
        message = _outcome([1.0]).to_dict()
        message["env_scores"][0]["adaptation"] = bad
        with pytest.raises(MalformedResult):
            parse_outcome(message)
    assert curve_of([[2.0], [4.0]], 2, "adaptation") == [3.0]


def test_the_result_parser_takes_a_mean_scratch_curve_of_the_adaptation_curves_points():
    score = parse_outcome(_outcome([1.0, 2.0], [0.5, None]).to_dict()).env_scores[0]
    assert (score.adaptation, score.scratch) == ([1.0, 2.0], [0.5, None])
    old = _outcome([1.0]).to_dict()
    del old["env_scores"][0]["scratch"]  # a message from before the field
    assert parse_outcome(old).env_scores[0].scratch is None
    assert Outcome.from_dict(old).env_scores[0].scratch is None
    for bad in ([[1.0, 2.0], [2.0, 3.0]], [1.0], [1.0, 2.0, 3.0], ["x", 1.0], [1.0, math.inf], 2):
        message = _outcome([1.0, 2.0]).to_dict()
        message["env_scores"][0]["scratch"] = bad
        with pytest.raises(MalformedResult, match="scratch"):
            parse_outcome(message)


def _candidate_row(run_id: str, seq: int = 0, code_hash: str = "h0", **extra) -> dict:
    return {
        "id": f"{run_id}-{seq}",
        "run_id": run_id,
        "seq": seq,
        "task": "drift",
        "suite": "smoke",
        "hash": code_hash,
        "code": "def drift(ratio, advantage, epsilon):\n    return 0 * ratio\n",
        "seeds": [0, 1],
        "eval_key": "k",
        **extra,
    }


def test_an_outcome_with_a_curve_survives_the_archive_round_trip(tmp_path):
    outcome = _outcome([1.0, None, 2.5], [0.5, 0.75, None])
    plain = EnvScore(
        **{
            **outcome.env_scores[0].__dict__,
            "env": "CartPole-v1",
            "adaptation": None,
            "scratch": None,
        }
    )
    outcome.env_scores.append(plain)
    with Archive(tmp_path / "a.db") as archive:
        run_id = archive.create_run(task="drift", suite="smoke")
        archive.record_candidate(_candidate_row(run_id), outcome)
        stored = archive.query("SELECT adaptation FROM evaluations ORDER BY id")
        assert [json.loads(r["adaptation"]) if r["adaptation"] else None for r in stored] == [
            [1.0, None, 2.5],
            None,
        ]
        assert [r["adaptation"] for r in archive.evaluations(f"{run_id}-0")] == [
            [1.0, None, 2.5],
            None,
        ]
        stored = archive.query("SELECT scratch FROM evaluations ORDER BY id")
        assert [r["scratch"] for r in stored] == ["[0.5, 0.75, null]", None]
        assert [r["scratch"] for r in archive.evaluations(f"{run_id}-0")] == [
            [0.5, 0.75, None],
            None,
        ]
        back = decode_outcome(archive.candidate(f"{run_id}-0"))
    assert [s.adaptation for s in back.env_scores] == [[1.0, None, 2.5], None]
    assert [s.scratch for s in back.env_scores] == [[0.5, 0.75, None], None]
    assert back.env_scores[0] == outcome.env_scores[0]


def test_an_archive_from_version_7_migrates_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    db = Database(sqlite3.connect(path))
    for migration in MIGRATIONS[:7]:
        migration(db)
    assert not {"adaptation", "scratch"} & set(db["evaluations"].columns_dict)
    old = _outcome(None).to_dict()
    del old["env_scores"][0]["adaptation"]  # as version 7 wrote it
    del old["env_scores"][0]["scratch"]
    db["candidates"].insert(
        {**_candidate_row("old"), "seeds": "[0, 1]", "status": "passed", "outcome": json.dumps(old)}
    )
    db["evaluations"].insert(
        {"candidate_id": "old-0", "env": "CartPole-v1", "mean": 110.0, "positive_value_loss": 0.5}
    )
    db.execute("PRAGMA user_version = 7")
    db.conn.commit()
    db.conn.close()
    with Archive(path) as archive:
        assert archive.schema_version == SCHEMA_VERSION
        (row,) = archive.evaluations("old-0")
        assert row["adaptation"] is None and row["scratch"] is None
        assert (row["mean"], row["positive_value_loss"]) == (110.0, 0.5)
        old_score = decode_outcome(archive.candidate("old-0")).env_scores[0]
        assert old_score.adaptation is None and old_score.scratch is None
        run_id = archive.create_run(task="drift", suite="smoke")
        archive.record_candidate(_candidate_row(run_id), _outcome([0.25, 0.5], [0.25, 0.3]))
        (new,) = archive.evaluations(f"{run_id}-0")
        assert (new["adaptation"], new["scratch"]) == ([0.25, 0.5], [0.25, 0.3])
    with sqlite3.connect(path) as conn:
        columns = {r[1]: r[2] for r in conn.execute("PRAGMA table_info(evaluations)")}
    assert columns["adaptation"] == columns["scratch"] == "TEXT"


def test_the_axis_says_what_an_adaptation_point_counts():
    assert x_label("Meta-rl2/CartPole-v1") == "episode in trial"
    assert x_label("Meta-maml/Pendulum-v1") == "inner steps"
    assert x_label("CartPole-v1") == "adaptation point"
    assert [significant(v) for v in (123.456, 0.012345, 2.0, None, math.nan)] == [
        "123",
        "0.0123",
        "2",
        "—",
        "—",
    ]


def test_the_figure_draws_a_panel_per_env_with_the_baseline_dashed():
    def curve(candidate: str, env: str, mean: list, baseline: bool) -> AdaptationCurve:
        return AdaptationCurve(candidate, "", baseline, env, "test", "final", 2, mean)

    curves = [
        curve("r1-3", "Meta-rl2/A", [1.0, 2.0], False),
        curve("r1-3", "Meta-maml/B", [5.0, None, 7.0], False),
        curve("r1-0", "Meta-rl2/A", [1.0, 1.0], True),
    ]
    figure, drawn = adaptation_figure(curves)
    assert drawn == 2
    traces = [(t.name, list(t.x), list(t.y), t.line.dash, t.showlegend) for t in figure.data]
    assert traces == [
        ("r1-3 (incumbent)", [0, 1], [1.0, 2.0], "solid", True),
        ("r1-0 (baseline)", [0, 1], [1.0, 1.0], "dash", True),
        ("r1-3 (incumbent)", [0, 1, 2], [5.0, None, 7.0], "solid", False),
    ]
    assert figure.layout.xaxis.title.text == "episode in trial"
    assert figure.layout.xaxis2.title.text == "inner steps"
    assert [a.text for a in figure.layout.annotations] == [
        "Meta-rl2/A (test)",
        "Meta-maml/B (test)",
    ]


def test_the_figure_draws_the_incumbents_scratch_curve_dotted_once_in_the_legend():
    def curve(candidate: str, env: str, mean: list, baseline: bool, scratch=None):
        return AdaptationCurve(candidate, "", baseline, env, "test", "final", 2, mean, scratch)

    curves = [
        curve("r1-3", "Meta-rl2/A", [1.0, 2.0], False, [1.0, 1.25]),
        curve("r1-3", "Meta-maml/B", [5.0, 7.0], False, [5.0, None]),
        curve("r1-0", "Meta-rl2/A", [1.0, 1.0], True),
    ]
    figure, _ = adaptation_figure(curves)
    traces = [(t.name, list(t.y), t.line.dash, t.showlegend) for t in figure.data]
    assert traces == [
        ("r1-3 (incumbent)", [1.0, 2.0], "solid", True),
        (SCRATCH_LABEL, [1.0, 1.25], "dot", True),
        ("r1-0 (baseline)", [1.0, 1.0], "dash", True),
        ("r1-3 (incumbent)", [5.0, 7.0], "solid", False),
        (SCRATCH_LABEL, [5.0, None], "dot", False),
    ]
    assert SCRATCH_LABEL == "PPO from scratch (same tasks, same experience)"


def _score(env: str, role: str, curve, scratch=None) -> EnvScore:
    return EnvScore(
        env=env,
        seeds=[0, 1],
        total_timesteps=1000,
        returns=[1.0, 1.0],
        mean=1.0,
        std=0.0,
        normalised=0.5,
        baseline_mean=1.5,
        random_mean=0.5,
        role=role,
        adaptation=curve,
        scratch=scratch,
    )


def _record(
    archive: Archive, run_id: str, seq: int, code_hash: str, curves: dict, scratch=None
) -> None:
    """A passed candidate scored on a train env and on the held-out envs of `curves`, with
    the from-scratch curves of `scratch` (same keys) where given."""
    scratch = scratch or {}
    scores = [_score("Meta-rl2/train-task", "train", [9.0, 9.0])] + [
        _score(env, role, curve, scratch.get((env, role))) for (env, role), curve in curves.items()
    ]
    outcome = Outcome(True, "full", env_scores=scores, fitness=0.5 + seq, heldout=0.5)
    archive.record_candidate(
        _candidate_row(run_id, seq, code_hash, status="passed", total_timesteps=1000, name=""),
        outcome,
    )


CURVES = {
    ("Meta-rl2/CartPole-v1", "validation"): [10.0, 20.5, 31.25],
    ("Meta-maml/Pendulum-v1", "test"): [-1234.5, -600.0, None],
}
SCRATCH = {
    ("Meta-rl2/CartPole-v1", "validation"): [10.0, 12.0, 13.5],
    ("Meta-maml/Pendulum-v1", "test"): [-1234.5, -1100.0, -1000.0],
}


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> tuple[str, str, str]:
    """(page, the meta-RL run's id, the PPO run's id): a run whose incumbent and baseline
    program carry adaptation curves, and one without any."""
    path = tmp_path_factory.mktemp("adaptation") / "a.db"
    baseline_hash = source_hash(get_task("drift").baseline_program().source)
    with Archive(path) as archive:
        meta = archive.create_run(task="drift", suite="smoke", best_id="r1-1")
        # the baseline's own scratch curves are not drawn: only the incumbent's evaluation's
        ones = {k: [1.0, 1.0, 1.0] for k in CURVES}
        _record(archive, meta, 0, baseline_hash, ones, scratch=ones)
        _record(archive, meta, 1, "h1", CURVES, scratch=SCRATCH)
        ppo = archive.create_run(task="drift", suite="smoke", best_id="r2-0")
        _record(archive, ppo, 0, "h2", {k: None for k in CURVES})
        write_report(archive, [meta], path.parent / "meta.html")
        write_report(archive, [ppo], path.parent / "ppo.html")
    page = (path.parent / "meta.html").read_text() + (path.parent / "ppo.html").read_text()
    return page, meta, ppo


def test_a_meta_rl_report_draws_and_tabulates_the_adaptation_curves(pages):
    page, meta, _ = pages
    section = sections(page)[(meta, "adaptation")]
    assert f"{meta}-adaptation-plot" in section
    assert "episode in trial" in section and "inner steps" in section
    assert "the baseline program's evaluations in this archive have no" not in section
    table = rows(section, "curve")
    assert list(table) == [
        "r1-1|Meta-rl2/CartPole-v1",
        "scratch|r1-1|Meta-rl2/CartPole-v1",
        "r1-1|Meta-maml/Pendulum-v1",
        "scratch|r1-1|Meta-maml/Pendulum-v1",
        "r1-0|Meta-rl2/CartPole-v1",
        "r1-0|Meta-maml/Pendulum-v1",
    ]
    assert table["scratch|r1-1|Meta-rl2/CartPole-v1"] == [
        SCRATCH_LABEL,
        "Meta-rl2/CartPole-v1",
        "validation",
        "2",
        "10, 12, 13.5",
    ]
    assert table["scratch|r1-1|Meta-maml/Pendulum-v1"][4] == "-1.23e+03, -1.1e+03, -1e+03"
    # drawn: one dotted line per panel, labelled once; the caption says what it is
    assert section.count(f'"name":"{SCRATCH_LABEL}"') == 2
    assert '"dash":"dot"' in section
    assert "dotted, PPO from scratch (same tasks, same experience)" in section
    assert table["r1-1|Meta-rl2/CartPole-v1"][1:] == [
        "Meta-rl2/CartPole-v1",
        "validation",
        "2",
        "10, 20.5, 31.2",
    ]
    assert table["r1-1|Meta-maml/Pendulum-v1"][4] == "-1.23e+03, -600, —"
    assert table["r1-0|Meta-rl2/CartPole-v1"][0].startswith("r1-0 (baseline)")
    assert "Meta-rl2/train-task" not in section  # a train env is no held-out task


def test_the_show_cell_adds_the_scratch_curve_when_recorded(tmp_path):
    assert _adaptation_cell([0.5, 0.6875]) == "0.50 → 0.69"
    assert _adaptation_cell([0.5, 0.6875], [0.5, 0.52]) == "0.50 → 0.69 (scratch 0.50 → 0.52)"
    assert _adaptation_cell([0.5, 0.6875], None) == _adaptation_cell([0.5, 0.6875], [])
    assert _adaptation_cell(None, [0.5]) == ""
    path = tmp_path / "a.db"
    with Archive(path) as archive:
        run_id = archive.create_run(task="drift", suite="smoke")
        _record(
            archive,
            run_id,
            0,
            "h0",
            {("Meta-rl2/A", "test"): [0.5, 0.6875], ("Meta-rl2/B", "test"): [0.25, 0.75]},
            scratch={("Meta-rl2/A", "test"): [0.5, 0.52]},
        )
    result = invoke("show", f"{run_id}-0", "--archive", str(path), env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "0.50 → 0.69 (scratch 0.50 → 0.52)" in result.stdout
    assert "0.25 → 0.75" in result.stdout and "0.25 → 0.75 (scratch" not in result.stdout


def test_a_run_without_adaptation_curves_has_no_adaptation_section(pages):
    page, meta, ppo = pages
    found = {section for run, section in sections(page) if run == ppo}
    assert "fitness" in found and "adaptation" not in found
    assert f"{ppo}-adaptation-plot" not in page
    assert (meta, "adaptation") in sections(page)


def test_a_candidates_scratch_reference_is_its_baselines_on_the_same_seeds():
    """Candidates' programs leave the from-scratch reference out (rl/meta/loop.py); the parent
    records the baseline's, trained on the same seeds and tasks, with each candidate's score."""
    settings = CascadeSettings(
        suite="bandit-tasks@rl2", seeds=2, seed_values=[5, 9], skip_short=True, heldout=False
    )
    [entry] = plan_runs(settings)
    config = entry.config
    raw = {
        "env": config.env_name,
        "seeds": [5, 9],
        "total_timesteps": entry.steps,
        "final_returns": [0.6, 0.7],
        "adaptation": [[0.5, 0.7], [0.6, 0.8]],
        "scratch": [],  # left out by the candidate's program
    }
    outcome = Outcome(passed=True, stage="full")
    outcome.env_scores = [env_score(raw, 0.6, 0.5, "train", "full")]
    baseline = {"scratch": [[0.5, 0.5], [0.5, 0.7]]}
    references = {entry.key: Reference(0.6, 0.5, 1.0, baseline)}
    verified = verify_outcome(outcome, [entry], references, settings)
    assert verified.env_scores[0].scratch == [0.5, 0.6]  # the baseline's, its mean per point
    assert verified.env_scores[0].adaptation == [0.55, 0.75]  # the candidate's own
