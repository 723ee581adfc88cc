"""External evaluations (archives/external.py): a program scored in DiscoGen's harness is archived
beside our evaluations, found again by its code, shown by `metarl show` and the report, and
never mixed into our scores.

The harness itself needs a DiscoGen runtime (tests/test_discogen.py runs it, slow); here its
outcomes are the harness's own types: a real static-check failure from `DiscoGenHarness`, and
passed outcomes with the numbers a run would carry.
"""

from __future__ import annotations

import sqlite3
import sys

import pytest
from conftest import invoke
from sqlite_utils import Database

from metarl.archives import SCHEMA_VERSION, Archive
from metarl.archives.external import (
    ExternalEvaluation,
    external_evaluations,
    record_external,
    run_external,
)
from metarl.archives.schema import MIGRATIONS
from metarl.cli.discogen import _archive_outcomes
from metarl.discogen.harness import PROTOCOL, DiscoGenHarness, GameScore, HarnessOutcome
from metarl.discogen.runtime import Runtime
from metarl.report.page import write_report
from metarl.tasks.candidate import source_hash

pytestmark = pytest.mark.usefixtures("restore_logging")

NEVER_STARTED = Runtime("/nonexistent/python", "1.3.0", "3.12.1", ())
CONFIG = {"TOTAL_TIMESTEPS": 50_000}


def passed(ratio_breakout: float, ratio_freeway: float) -> HarnessOutcome:
    """A passed outcome on DiscoGen's training side with these candidate / base ratios."""
    games = (
        GameScore("MinAtar/Breakout", 2.0 * ratio_breakout, 0.5, 2.0, 0.4, ratio_breakout),
        GameScore("MinAtar/Freeway", 10.0 * ratio_freeway, 1.0, 10.0, 1.0, ratio_freeway),
    )
    protocol = {
        **PROTOCOL,
        "discogen": "1.3.0",
        "side": "train",
        "envs": ["MinAtar/Breakout", "MinAtar/Freeway"],
        "config": CONFIG,
    }
    fitness = (ratio_breakout + ratio_freeway) / 2
    return HarnessOutcome(True, "done", None, games, fitness, protocol, "bubblewrap", 12.0)


def seeds_of(path) -> list[dict]:
    with Archive(path, must_exist=True) as archive:
        return archive.query(
            "SELECT id, name, code, hash, fitness FROM candidates WHERE status = 'passed' "
            "ORDER BY fitness"
        )


def add_candidate(path, name: str, code: str, fitness: float) -> None:
    """A third passed candidate in the seeded run (a copy of PPO-clip's row with another
    program and score): the smoke run archives only two seed programs."""
    with Archive(path) as archive:
        (row,) = archive.query("SELECT * FROM candidates WHERE name = 'ppo_clip'")
        seq = archive.query("SELECT max(seq) AS seq FROM candidates")[0]["seq"] + 1
        row.update(
            id=f"{row['run_id']}-{seq}", seq=seq, name=name, code=code, hash=source_hash(code),
            fitness=fitness, fitness_low=fitness - 0.1, fitness_high=fitness + 0.1,
        )  # fmt: skip
        with archive.transaction() as db:
            db["candidates"].insert(row)


def test_an_archive_from_version_9_migrates_to_one_with_external_evaluations(tmp_path):
    path = tmp_path / "v9.db"
    db = Database(sqlite3.connect(path))
    for migration in MIGRATIONS[:9]:
        migration(db)
    db["runs"].insert({"id": "r1", "seq": 1, "task": "drift", "method": "discovery"})
    db.execute("PRAGMA user_version = 9")
    db.conn.commit()
    db.conn.close()
    with Archive(path) as archive:
        assert archive.schema_version == SCHEMA_VERSION
        assert archive.get_run("r1")["task"] == "drift"
        assert external_evaluations(archive, ["abc"]) == []
        row_id = record_external(
            archive,
            ExternalEvaluation(
                "abc", "drift", "discogen", "1.3.0", "train", {"seeds": 8}, True, "done"
            ),
        )
        (back,) = external_evaluations(archive, ["abc"])
        assert back.id == row_id and back.protocol == {"seeds": 8} and back.passed


def test_a_file_scored_by_discogen_is_found_by_the_archived_candidate_with_its_code(
    seeded_archive,
):
    """A file evaluated before it was ever archived (no candidate id) matches the candidate
    with the same code by its normalised source hash; its numbers round-trip exactly."""
    seed = seeds_of(seeded_archive)[0]
    source = seed["code"] + "\n\n# a comment the normalised hash ignores\n"
    (row_id,) = _archive_outcomes(
        str(seeded_archive), [(source, "drift", None)], [passed(1.25, 0.5)], "1.3.0"
    )
    with Archive(seeded_archive) as archive:
        (found,) = external_evaluations(archive, [seed["hash"]], [seed["id"]])
        fitness_after = archive.candidate(seed["id"])["fitness"]
    assert source_hash(source) == seed["hash"]
    assert found.id == row_id and found.candidate_id is None and found.task == "drift"
    assert found.fitness == pytest.approx(0.875) and found.side == "train"
    assert [(g.env, g.candidate, g.base, g.normalised) for g in found.games] == [
        ("MinAtar/Breakout", 2.5, 2.0, 1.25),
        ("MinAtar/Freeway", 5.0, 10.0, 0.5),
    ]
    assert found.protocol["config"] == CONFIG and found.protocol["seeds"] == 8
    assert found.versions.get("jax") and found.isolation == "bubblewrap"
    assert fitness_after == seed["fitness"]  # ours is untouched


def test_show_lists_a_candidates_discogen_scores_apart_from_ours(seeded_archive):
    seed = seeds_of(seeded_archive)[-1]
    _archive_outcomes(
        str(seeded_archive), [(seed["code"], "drift", seed["id"])], [passed(1.1, 0.9)], "1.3.0"
    )
    result = invoke("show", seed["id"], "--archive", str(seeded_archive))
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "in other harnesses: candidate / the harness's base module, same seeds" in text
    assert "discogen 1.3.0" in text and "Breakout 1.100, Freeway 0.900" in text
    assert "{'TOTAL_TIMESTEPS': 50000}" in text


def test_a_hostile_candidates_failure_is_archived_and_shown_inert(seeded_archive):
    """The harness's real static check refuses it before DiscoGen runs; the archived reason
    quotes candidate text, and `show` prints it as text, never as markup."""
    hostile = (
        "import os  # [bold red]PWNED[/bold red]\n"
        "def drift(ratio, advantage, epsilon):\n    return ratio * 0.0\n"
    )
    outcome = DiscoGenHarness(NEVER_STARTED).evaluate(hostile, "drift")
    assert not outcome.passed and outcome.stage == "static"
    seed = seeds_of(seeded_archive)[0]
    _archive_outcomes(str(seeded_archive), [(hostile, "drift", seed["id"])], [outcome], "1.3.0")
    with Archive(seeded_archive) as archive:
        (found,) = external_evaluations(archive, [], [seed["id"]])
    assert not found.passed and found.fitness is None and found.games == ()
    assert found.reason.startswith("static check: line 1: import of `os` is not allowed")
    result = invoke("show", seed["id"], "--archive", str(seeded_archive))
    assert result.exit_code == 0, result.output
    assert "failed at static" in result.stdout


def test_the_report_puts_discogens_order_beside_ours_with_its_rank_correlation(
    seeded_archive, tmp_path
):
    """Three candidates scored in both, in the same order: Spearman 1.00 over n = 3; a second
    protocol (another config) is its own group and, with one candidate, gives no correlation."""
    add_candidate(
        seeded_archive,
        "half",
        "def drift(ratio, advantage, epsilon):\n    return 0.5 * (ratio - 1.0) ** 2\n",
        0.25,
    )
    seeds = seeds_of(seeded_archive)  # ascending by our fitness
    assert len({s["fitness"] for s in seeds}) == 3
    outcomes = [passed(0.5, 0.5), passed(0.8, 0.9), passed(1.2, 1.0)]
    _archive_outcomes(
        str(seeded_archive), [(s["code"], "drift", s["id"]) for s in seeds], outcomes, "1.3.0"
    )
    other = passed(1.0, 1.0)
    other = HarnessOutcome(**{**other.__dict__, "protocol": {**other.protocol, "config": {}}})
    _archive_outcomes(
        str(seeded_archive), [(seeds[0]["code"], "drift", seeds[0]["id"])], [other], "1.3.0"
    )
    with Archive(seeded_archive) as archive:
        (run_id,) = {row["run_id"] for row in archive.query("SELECT run_id FROM candidates")}
        assert len(run_external(archive, run_id)) == 4
        page = write_report(archive, [run_id], tmp_path / "report.html").path.read_text()
    section = page.split('data-section="harnesses"')[1].split("</section>")[0]
    agreement = " ".join(section.split())
    assert (
        "config TOTAL_TIMESTEPS=50000: 3 candidates scored in both; Spearman's rho of ours "
        "against theirs 1.00" in agreement
    )
    assert "config its own: 1 candidate scored in both; too few (or tied) to rank" in agreement
    for seed in seeds:
        assert f'data-candidate="{seed["id"]}"' in section


def test_a_report_without_external_evaluations_has_no_harness_section(seeded_archive, tmp_path):
    with Archive(seeded_archive) as archive:
        (run_id,) = {row["run_id"] for row in archive.query("SELECT run_id FROM candidates")}
        page = write_report(archive, [run_id], tmp_path / "report.html").path.read_text()
    assert 'data-section="harnesses"' not in page


@pytest.mark.parametrize(
    "args, message",
    [
        (["r1-1", "--harness", "discogen"], "no such file: r1-1 (and no archive at"),
        (["x.py", "-t", "drift", "--no-record"], "--no-record are options of --harness discogen"),
        (["x.py"], "--task: which contract the files implement (drift, optimizer"),
    ],
)
def test_evaluate_names_a_wrong_target_or_option_in_one_line(tmp_path, args, message):
    result = invoke("evaluate", *args, "--archive", str(tmp_path / "none.db"))
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.strip().count("\n") == 0
    assert not (tmp_path / "none.db").exists()


def test_an_archived_candidate_is_evaluated_by_its_id_and_its_own_task(seeded_archive):
    """`metarl evaluate r1-0 --harness discogen` reads the candidate's code and task from the
    archive; with an interpreter that has no DiscoGen it stops there, in one line, writing
    nothing."""
    seed = seeds_of(seeded_archive)[0]
    archive = ["--archive", str(seeded_archive)]
    python = sys.executable if sys.version_info < (3, 12) else "/usr/bin/python3"
    no_discogen = ["--discogen-python", python]  # metarl's own 3.11: no DiscoGen
    result = invoke("evaluate", seed["id"], "--harness", "discogen", *no_discogen, *archive)
    assert result.exit_code == 2, result.output
    assert "has no discogen package" in result.stderr
    assert result.stderr.strip().count("\n") == 0
    wrong = invoke("evaluate", seed["id"], "-t", "optimizer", "--harness", "discogen", *archive)
    assert wrong.exit_code == 2
    assert f"{seed['id']} is a drift candidate, not optimizer" in wrong.stderr
    with Archive(seeded_archive) as store:
        assert external_evaluations(store, [seed["hash"]], [seed["id"]]) == []
