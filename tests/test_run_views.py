"""One story in every view: `metarl show RUN`, the leaderboard, the run summary printed after
`metarl discover` and the HTML report count a run's candidates with the same words and name
the same incumbent (`metarl.archives.incumbents.run_incumbent`).

The run is in-process, with the role-aware fake evaluator (tests/role_evaluator.py): every
child beats the seed programs on the training envs but is worse on validation
(`validation_gain=-1`), so the best train score is a child's while the validation race keeps
a seed program as the incumbent: the case where a view that re-derives "the best" from train
scores disagrees with the run.
"""

from __future__ import annotations

import json

import pytest
from conftest import invoke
from report_pages import rows, sections
from role_evaluator import RoleEvaluator

from metarl.archives import Archive
from metarl.archives.incumbents import run_counts, run_incumbent, run_summary
from metarl.archives.queries import leaderboard
from metarl.cli.console import console
from metarl.cli.progress import print_run_report
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.report.figures import fitness_over_evaluations
from metarl.report.page import write_report
from metarl.report.points import RECORDED
from metarl.report.settings import ReportSettings
from metarl.report.story import run_story
from metarl.rl.suites import SUITES, Suite

# two seed programs scored first, then one generation of three children
COUNTS = "3 children + 2 seed programs, 5 scored"


@pytest.fixture(scope="module")
def raced_run(tmp_path_factory):
    """(archive path, the loop's result, its events): a run whose best train score is a
    child's and whose incumbent, kept by its validation race, is a seed program."""
    suite = Suite(
        "views",
        envs=("CartPole-v1",),
        total_timesteps=8192,
        short_budget=4096,
        heldout=("Catch-bsuite",),
        validation=("CartPole-v1:gravity=15.0+force_mag=7.0", "Acrobot-v1"),
        default_seeds=1,
    )
    patch = pytest.MonkeyPatch()
    patch.setitem(SUITES, "views", suite)
    config = DiscoverConfig(
        suite="views",
        timesteps=8192,
        seeds=1,
        seed_values=[0],
        max_time=None,
        islands=1,
        budget=3,
        children=3,
        confirm=True,
        confirm_seeds=4,
        race_seeds=12,
        rng_seed=3,
    )
    path = tmp_path_factory.mktemp("views") / "metarl.db"
    events, log = [], []
    with Archive(path) as archive:
        loop = DiscoveryLoop(
            archive,
            config,
            MutationProposer(),
            on_event=lambda kind, data: events.append((kind, data)),
            evaluator_factory=lambda settings, workers: RoleEvaluator(
                settings, log, validation_gain=-1.0
            ),
        )
        result = loop.run()
    yield path, result, events
    patch.undo()


@pytest.fixture(scope="module")
def incumbent(raced_run):
    """The run's incumbent as the selection decided it, and the precondition checked: a child
    has a better train score, and lost its validation race."""
    path, result, events = raced_run
    races = [data for kind, data in events if kind == "confirm"]
    assert races and races[-1]["verdict"] != "better", "no race was lost: nothing exercised"
    decided = [data["incumbent"] for kind, data in events if kind == "generation"][-1]
    with Archive(path, must_exist=True) as archive:
        best_train = leaderboard(archive, run_id=result.run_id).rows[0]
        assert archive.get_run(result.run_id)["best_id"] == decided == result.best_id
    assert best_train.id != decided and not best_train.is_seed
    return decided


def _text(output: str) -> str:
    """Terminal output with its wrapping undone."""
    return " ".join(output.split())


def test_one_function_names_the_incumbent_selection_decided(raced_run, incumbent):
    path, result, _ = raced_run
    with Archive(path, must_exist=True) as archive:
        chosen = run_incumbent(archive, result.run_id)
        counts = run_counts(archive, result.run_id)
    assert chosen.id == incumbent and chosen.is_seed
    assert chosen.validated and chosen.why().startswith("validated")
    assert (counts.children, counts.seeds, counts.scored) == (3, 2, 5)
    assert counts.describe() == COUNTS


def test_show_run_counts_children_and_seed_programs_and_names_the_incumbent(
    raced_run, incumbent, restore_logging
):
    path, result, _ = raced_run
    shown = invoke("show", result.run_id, "--archive", str(path))
    assert shown.exit_code == 0, shown.output
    text = _text(shown.stdout)
    assert f"candidates {COUNTS} · generations done 1" in text
    assert f"incumbent {incumbent} " in text and "validated" in text
    assert "None" not in text


def test_the_leaderboard_marks_the_incumbent_below_the_best_train_score(
    raced_run, incumbent, restore_logging
):
    path, result, _ = raced_run
    board = json.loads(invoke("leaderboard", "--json", "--archive", str(path)).stdout)
    assert [row["id"] for row in board if row["incumbent"]] == [incumbent]
    assert board[0]["id"] != incumbent  # ranked by train score: the child first
    table = _text(invoke("leaderboard", "--archive", str(path)).stdout)
    assert f"{incumbent} ★" in table and "★ marks the run's incumbent" in table


def test_the_run_summary_names_the_same_incumbent_and_why(raced_run, incumbent):
    path, result, _ = raced_run
    with Archive(path, must_exist=True) as archive:
        board = leaderboard(archive, run_id=result.run_id)
        summary = run_summary(archive, result.run_id)
    rank = next(row.rank for row in board.rows if row.id == incumbent)
    with console.capture() as captured:
        print_run_report(result, board, summary, 1.0, 3, "")
    text = _text(captured.get())
    assert f": {COUNTS} (children: 3 passed); incumbent {incumbent} " in text
    assert "validated: it won or held its validation races" in text
    assert f"#{rank} on the leaderboard, which ranks by train score" in text
    assert f"metarl show {incumbent}" in text
    assert "None" not in text and "$0.0000" not in text


def test_the_report_tells_the_same_story(raced_run, incumbent, tmp_path):
    path, result, _ = raced_run
    out = tmp_path / "report.html"
    with Archive(path, must_exist=True) as archive:
        story = run_story(archive, result.run_id, ReportSettings())
        write_report(archive, [result.run_id], out)
    # the step line is what selection recorded, not the best train score so far
    assert story.incumbent.source == RECORDED and story.incumbent.ids == [incumbent]
    figure, _ = fitness_over_evaluations(story, limit=100)
    line = next(trace for trace in figure.data if trace.name == "incumbent")
    assert set(line.text) == {incumbent}
    assert story.header.best_id == incumbent
    assert story.generalisation.incumbent == incumbent

    page = sections(out.read_text())
    header = page[(result.run_id, "header")]
    assert f'data-value="candidates">{COUNTS}<' in header
    assert f'data-value="incumbent">{incumbent} ' in header and "validated" in header
    assert "LLM cost" not in header and "$0.0000" not in header  # an offline proposer
    fitness = page[(result.run_id, "fitness")]
    assert f'data-value="fitness-counts">{COUNTS}' in fitness
    assert list(rows(fitness, "candidate")) == [incumbent]
    listed = rows(page[(result.run_id, "generalisation")], "candidate")
    assert listed[incumbent][-1].startswith("incumbent")
