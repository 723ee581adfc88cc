"""An archive that fails: a damaged file is refused on opening in one line (`PRAGMA
quick_check`), every SQLite error reaches the user as an `ArchiveFault` (archives/faults.py),
and a run killed by a full disk is marked failed with the reason when it can be, and says
which command resumes it when it cannot.

The archives are tiny and written through the Archive API; discovery runs in-process with a
fake evaluator (tests/role_evaluator.py: no sandbox, no training). A full disk is SQLite's
`PRAGMA max_page_count` frozen at the file's size: a write that needs a new page then fails with
SQLITE_FULL, "database or disk is full", exactly as on a full disk. Everything is seeded.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from conftest import invoke
from role_evaluator import RoleEvaluator

import metarl.discovery.batches
from metarl.archives import Archive, ArchiveError
from metarl.archives.faults import (
    ArchiveBusy,
    ArchiveConflict,
    ArchiveDamaged,
    ArchiveFault,
    ArchiveFull,
    archive_fault,
)
from metarl.archives.runs import RunSpec, open_run
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.evaluation.outcome import EnvScore, Outcome

pytestmark = pytest.mark.usefixtures("restore_logging")

CORRUPTION_SEED = 20261128  # the random bytes written into the archive
CORRUPT_BYTES = 8192
NO_LIMIT = 1073741823  # SQLite's default max_page_count
HOST, PID = "archive-faults.example", 4242  # fixed: the file's layout is the same on any machine
SETTINGS = dict(suite="smoke", timesteps=8192, seeds=1, seed_values=[0], max_time=None)


# -- building a small archive ----------------------------------------------------------------


def _outcome(fitness: float) -> Outcome:
    score = EnvScore(
        "CartPole-v1",
        [0],
        8192,
        [100.0 * fitness],
        100.0 * fitness,
        0.0,
        fitness,
        100.0,
        20.0,
        curve_steps=list(range(0, 8192, 128)),
        curve=[fitness * i for i in range(64)],
    )
    return Outcome(passed=True, stage="full", env_scores=[score], fitness=fitness)


def _candidate(run_id: str, seq: int) -> dict:
    return {
        "id": f"{run_id}-{seq}",
        "run_id": run_id,
        "seq": seq,
        "task": "drift",
        "suite": "smoke",
        "hash": f"{run_id}h{seq}",
        "code": f"def drift(ratio, advantage, epsilon):\n    return {seq} * ratio  # {run_id}\n",
        "name": f"cand{seq}",
        "thought": "scale the ratio " * 8,
        "parent_ids": [f"{run_id}-{seq - 1}"] if seq else [],
        "generation": seq,
        "is_seed": int(seq == 0),
        "proposer": "mutation:constant",
        "eval_key": "k",
    }


def _small_archive(path: Path, runs: int = 3, candidates: int = 12) -> None:
    """An archive of `runs` finished runs of `candidates` candidates each (with evaluations,
    learning curves, lineage and messages), its WAL folded into the file."""
    with Archive(path) as archive:
        for _ in range(runs):
            run = archive.create_run(task="drift", suite="smoke", host=HOST, pid=PID)
            for seq in range(candidates):
                archive.record_candidate(
                    _candidate(run, seq),
                    _outcome(1.0 + seq / 10),
                    messages=[{"role": "assistant", "content": f"candidate {seq} of {run}"}],
                )
            archive.finish_run(run, "finished", "candidate budget spent")
        archive.query("PRAGMA wal_checkpoint(TRUNCATE)")


@pytest.fixture(scope="module")
def small_archive(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "small.db"
    _small_archive(path)
    return path


def _damaged_copy(source: Path, target: Path, shift: int = 0) -> int:
    """`target`: a copy of `source` with CORRUPT_BYTES random bytes (seeded) written into its
    middle (`shift` bytes further on). Returns the offset written at.

    8 KiB at any offset covers at least one whole 4 KiB page, its b-tree header included,
    which quick_check reads; only bytes that fall on free pages or inside a stored value
    escape it (`test_bytes_changed_inside_a_value_escape_every_cheap_check`)."""
    shutil.copyfile(source, target)
    offset = target.stat().st_size // 2 + shift
    noise = np.random.default_rng(CORRUPTION_SEED).bytes(CORRUPT_BYTES)
    with target.open("r+b") as file:
        file.seek(offset)
        file.write(noise)
    return offset


def _one_error_line(result, command: str) -> str:
    """The single stderr line of a command that failed as the CLI's convention says."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"metarl {command}: error: "), lines[0]
    return lines[0]


# -- a damaged file --------------------------------------------------------------------------


@pytest.mark.parametrize("shift", [0, 1234], ids=["on-a-page-boundary", "mid-page"])
def test_quick_check_finds_random_bytes_written_into_the_middle_of_an_archive(
    small_archive, tmp_path, shift
):
    with Archive(small_archive, must_exist=True) as archive:
        assert archive.integrity_check() == "ok"
    damaged = tmp_path / "damaged.db"
    _damaged_copy(small_archive, damaged, shift)
    with pytest.raises(ArchiveDamaged) as caught:
        Archive(damaged, must_exist=True)
    error = caught.value
    assert str(error).startswith(f"{damaged} is damaged (")
    assert "\n" not in str(error) and "*** in database" not in str(error)
    assert error.reason and error.reason in str(error)
    assert error.hint.startswith("restore a copy of the archive") and str(damaged) in error.hint
    assert isinstance(error, ArchiveError) and isinstance(error, sqlite3.DatabaseError)


@pytest.mark.parametrize(
    "command, args",
    [
        ("runs", []),
        ("show", ["r1-3"]),
        ("leaderboard", []),
        ("export", ["r1"]),
        ("report", ["r1", "-o", "{tmp}/report.html"]),
    ],
)
def test_every_reading_command_refuses_a_damaged_archive_in_one_line(
    small_archive, tmp_path, command, args
):
    damaged = tmp_path / "damaged.db"
    _damaged_copy(small_archive, damaged)
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    line = _one_error_line(invoke(command, *args, "--archive", str(damaged)), command)
    assert f"{damaged} is damaged (" in line and "; hint: restore a copy" in line
    assert not (tmp_path / "report.html").exists()


def test_bytes_changed_inside_a_value_escape_every_cheap_check(small_archive, tmp_path):
    """quick_check (and integrity_check) read structure, not values: a changed character in a
    candidate's code leaves every page well formed. Only reading and parsing every value could
    see it, which no check on opening can afford; the archive opens and reads the new bytes."""
    changed = tmp_path / "changed.db"
    shutil.copyfile(small_archive, changed)
    data = bytearray(changed.read_bytes())
    at = data.index(b"return 7 * ratio  # r2")
    data[at + len("return ")] = ord("9")
    changed.write_bytes(bytes(data))
    with Archive(changed, must_exist=True) as archive:
        assert archive.integrity_check() == "ok"
        assert "return 9 * ratio" in archive.candidate("r2-7")["code"]


def test_a_file_that_is_not_a_database_keeps_its_message(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 300)
    with pytest.raises(ArchiveDamaged, match="is not a usable SQLite archive"):
        Archive(junk)


# -- every SQLite error is an ArchiveFault ---------------------------------------------------


@pytest.mark.parametrize(
    "error, kind, sqlite_class",
    [
        (
            sqlite3.OperationalError("database or disk is full"),
            ArchiveFull,
            sqlite3.OperationalError,
        ),
        (
            sqlite3.DatabaseError("database disk image is malformed"),
            ArchiveDamaged,
            sqlite3.DatabaseError,
        ),
        (sqlite3.OperationalError("database is locked"), ArchiveBusy, sqlite3.OperationalError),
        (
            sqlite3.IntegrityError("UNIQUE constraint failed"),
            ArchiveConflict,
            sqlite3.IntegrityError,
        ),
        (sqlite3.OperationalError("disk I/O error"), ArchiveFault, sqlite3.Error),
    ],
    ids=["full", "damaged", "busy", "conflict", "other"],
)
def test_a_sqlite_error_becomes_the_fault_of_its_kind_keeping_its_sqlite_class(
    error, kind, sqlite_class
):
    fault = archive_fault(error, "a.db")
    assert type(fault) is kind and isinstance(fault, ArchiveError)
    assert isinstance(fault, sqlite_class)  # code written against sqlite3 still catches it
    assert "a.db" in str(fault) and fault.reason == str(error) and fault.hint
    assert archive_fault(fault) is fault


def test_a_real_constraint_violation_is_a_conflict_and_still_an_integrity_error(tmp_path):
    with Archive(tmp_path / "a.db") as archive:
        run = archive.create_run(task="drift", suite="smoke")
        archive.record_candidate(_candidate(run, 0), _outcome(1.0))
        with pytest.raises(ArchiveConflict, match="UNIQUE constraint failed") as caught:
            archive.record_candidate(_candidate(run, 0), _outcome(1.0))
        assert isinstance(caught.value, sqlite3.IntegrityError)
        assert archive.query("SELECT count(*) AS n FROM evaluations")[0]["n"] == 1


def test_a_full_disk_rolls_the_write_back_and_leaves_the_archive_usable(tmp_path):
    path = tmp_path / "a.db"
    with Archive(path) as archive:
        run = archive.create_run(task="drift", suite="smoke")
        archive.record_candidate(_candidate(run, 0), _outcome(1.0))
        pages = archive.query("PRAGMA page_count")[0]["page_count"]
        archive.query(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(ArchiveFull) as caught:
            for seq in range(1, 200):  # the page's spare room fills, then the file must grow
                archive.record_candidate(_candidate(run, seq), _outcome(1.0))
        assert str(caught.value) == f"cannot write {path}: database or disk is full"
        assert caught.value.hint == "free disk space, then `metarl resume RUN`"
        assert not archive.conn.in_transaction  # rolled back, not joined by the next write
        written = archive.query("SELECT count(*) AS n FROM candidates")[0]["n"]
        evaluations = archive.query("SELECT count(*) AS n FROM evaluations")[0]["n"]
        assert evaluations == written  # no half candidate
        archive.query(f"PRAGMA max_page_count = {NO_LIMIT}")
        archive.record_candidate(_candidate(run, written), _outcome(1.0))
    with Archive(path, must_exist=True) as archive:
        assert archive.query("SELECT count(*) AS n FROM candidates")[0]["n"] == written + 1
        assert archive.integrity_check() == "ok"


# -- a run killed by a full disk -------------------------------------------------------------


class FullDisk:
    """Fills the disk under an archive at its `fill_at`-th candidate write (the count of
    candidates just before is `before`); `refuse_all` also refuses the writes that would fit in
    place (a real full disk refuses those too: the WAL cannot grow)."""

    def __init__(self, monkeypatch, fill_at: int = 4, refuse_all: bool = False):
        self.fill_at, self.refuse_all = fill_at, refuse_all
        self.writes, self.before, self.full = 0, None, False
        record, update = Archive.record_candidate, Archive.update_run

        def record_candidate(archive, row, outcome, **extra):
            self.writes += 1
            if self.writes == self.fill_at:
                self.fill(archive)
            return record(archive, row, outcome, **extra)

        def update_run(archive, run_id, **fields):
            with archive.transaction():
                if self.full and self.refuse_all:  # needs ~256 new pages: SQLITE_FULL
                    archive.conn.execute(
                        "UPDATE runs SET error = zeroblob(1048576) WHERE id = ?", (run_id,)
                    )
                update(archive, run_id, **fields)

        monkeypatch.setattr(Archive, "record_candidate", record_candidate)
        monkeypatch.setattr(Archive, "update_run", update_run)

    def fill(self, archive: Archive) -> None:
        self.before = archive.query("SELECT count(*) AS n FROM candidates")[0]["n"]
        pages = archive.query("PRAGMA page_count")[0]["page_count"]
        archive.query(f"PRAGMA max_page_count = {pages}")
        self.full = True

    def free(self, archive: Archive) -> None:
        archive.query(f"PRAGMA max_page_count = {NO_LIMIT}")
        self.full = False


def _discovery(archive: Archive, budget: int = 12, resume: str | None = None) -> DiscoveryLoop:
    config = DiscoverConfig(**SETTINGS, budget=budget, children=2)
    return DiscoveryLoop(
        archive,
        config,
        MutationProposer(),
        resume=resume,
        evaluator_factory=lambda settings, workers: RoleEvaluator(settings, []),
    )


def _count(archive: Archive) -> int:
    return archive.query("SELECT count(*) AS n FROM candidates")[0]["n"]


def test_a_run_killed_by_a_full_disk_is_marked_failed_when_space_comes_back(tmp_path, monkeypatch):
    disk = FullDisk(monkeypatch)
    finish_run = Archive.finish_run

    def freed_then_finish(archive, *args, **kwargs):  # space freed as the run ends
        disk.free(archive)
        return finish_run(archive, *args, **kwargs)

    monkeypatch.setattr(Archive, "finish_run", freed_then_finish)
    with Archive(tmp_path / "a.db") as archive:
        with pytest.raises(ArchiveFull) as caught:
            _discovery(archive).run()
        error = caught.value
        assert str(error) == "run r1 failed: archive write failed: database or disk is full"
        assert error.hint == "free disk space, then `metarl resume r1`"
        assert isinstance(error.__cause__, ArchiveFull)
        row = archive.get_run("r1")
        assert row["status"] == "failed"
        assert (
            row["stop_reason"] == row["error"] == "archive write failed: database or disk is full"
        )
        assert disk.before is not None and _count(archive) == disk.before  # nothing lost


def test_a_run_whose_failure_cannot_be_written_says_so_and_resumes_once_space_is_freed(
    tmp_path, monkeypatch
):
    disk = FullDisk(monkeypatch, refuse_all=True)
    path = tmp_path / "a.db"
    with Archive(path) as archive:
        with pytest.raises(ArchiveFull) as caught:
            _discovery(archive).run()
        message = f"{caught.value}; hint: {caught.value.hint}"
        assert message.startswith(
            "run r1 stopped: archive write failed: database or disk is full; its row still "
            "says running"
        )
        assert "free disk space, then `metarl resume r1`" in message
        assert archive.get_run("r1")["status"] == "running"
        assert _count(archive) == disk.before
        disk.free(archive)
    with Archive(path, must_exist=True) as archive:  # a later `metarl resume r1`
        assert _count(archive) == disk.before
        result = _discovery(archive, resume="r1").run()
        assert result.status == "finished" and result.candidates == 12
        assert archive.get_run("r1")["status"] == "finished"
        assert archive.integrity_check() == "ok"


def test_discover_on_a_full_disk_ends_in_one_line_naming_the_resume(tmp_path, monkeypatch):
    FullDisk(monkeypatch, refuse_all=True)
    monkeypatch.setattr(
        metarl.discovery.batches,
        "evaluator_factory",
        lambda config: lambda settings, workers: RoleEvaluator(settings, []),
    )
    path = tmp_path / "a.db"
    result = invoke(
        "discover",
        *("--proposer", "mutation", "--suite", "smoke", "--timesteps", "8192"),
        *("--seeds", "1", "--seed-values", "0", "--max-time", "none", "--no-live"),
        *("--budget", "12", "--children", "2", "--archive", str(path)),
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert errors == [
        "metarl discover: error: run r1 stopped: archive write failed: database or disk is "
        "full; its row still says running (the archive refused to record the failure too); "
        "hint: free disk space, then `metarl resume r1`, which takes over a run whose process "
        "is gone"
    ], result.stderr
    with Archive(path, must_exist=True) as archive:
        assert archive.get_run("r1")["status"] == "running"


def test_the_shared_lifecycle_names_the_methods_resume_command(tmp_path):
    """ES (and GRPO) end through `RunSession`'s block: a fault leaving it is recorded and
    raised the same way."""
    spec = RunSpec(method="es", task="drift", suite="smoke", config={"population": 4})
    with Archive(tmp_path / "a.db") as archive:
        with pytest.raises(ArchiveFull) as caught, open_run(archive, spec) as run:
            pages = archive.query("PRAGMA page_count")[0]["page_count"]
            archive.query(f"PRAGMA max_page_count = {pages}")
            run.save(state={"es": "x" * 100_000})  # a state too big for the full disk
        assert str(caught.value) == (
            f"run {run.run_id} failed: archive write failed: database or disk is full"
        )
        assert caught.value.hint == f"free disk space, then `metarl es --resume {run.run_id}`"
        assert archive.get_run(run.run_id)["status"] == "failed"
