"""The run lifecycle every method shares (archives/runs.py): a live run's resume is refused, a
stale or killed one resumes, a run's end is recorded with its reason, and every method's run
appends to its log file beside the archive.

No training happens here: each method's run is started and stopped at its first event (a
Ctrl-C raised by the display), then handed to "another session" by writing its owner and
heartbeat through the archive, so liveness is decided by the rule alone (no sleeps).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from conftest import invoke

from metarl.archives.derived import Student, Teacher, derive, record_derived, teacher_settings
from metarl.archives.runs import (
    STALE_AFTER_S,
    LiveRun,
    RunSpec,
    listed_runs,
    live_reason,
    open_run,
)
from metarl.archives.store import Archive, ArchiveError
from metarl.evaluation.outcome import Outcome
from metarl.logs import run_log_path

pytestmark = pytest.mark.usefixtures("restore_logging")

ELSEWHERE = "another-host.example"
SPEC = RunSpec(method="es", task="drift", suite="smoke", config={"population": 4})


def _stamp(age_s: float) -> str:
    """An `updated_at` value `age_s` seconds ago, as the archive writes them."""
    then = datetime.now(timezone.utc) - timedelta(seconds=age_s)
    return then.isoformat(timespec="seconds")


def _owned_by_another_session(
    archive: Archive, run_id: str, *, age_s: float, host: str = ELSEWHERE, pid: int = 4242
) -> None:
    """Make `run_id` look as if another process runs it, its last heartbeat `age_s` ago."""
    archive.update_run(run_id, status="running", host=host, pid=pid, updated_at=_stamp(age_s))


def _interrupt(kind: str, data) -> None:
    """A display that stops the run at its first event, as Ctrl-C would."""
    raise KeyboardInterrupt


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# -- the rule ------------------------------------------------------------------------------------


def test_a_run_open_in_this_process_refuses_a_resume_until_its_block_ends(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with open_run(archive, SPEC) as run:
            with pytest.raises(LiveRun, match=f"run {run.run_id} is still running"):
                open_run(archive, SPEC, resume=run.run_id)
        assert archive.get_run(run.run_id)["status"] == "finished"
        with open_run(archive, SPEC, resume=run.run_id) as again:
            assert again.resumed and again.row["status"] == "finished"


def test_another_hosts_run_is_live_until_its_heartbeat_is_older_than_the_stale_time(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with open_run(archive, SPEC) as run:
            pass
        _owned_by_another_session(archive, run.run_id, age_s=STALE_AFTER_S - 30)
        with pytest.raises(LiveRun, match=f"pid 4242 on {ELSEWHERE}, last heartbeat"):
            open_run(archive, SPEC, resume=run.run_id)
        assert archive.get_run(run.run_id)["host"] == ELSEWHERE  # a refusal writes nothing
        _owned_by_another_session(archive, run.run_id, age_s=STALE_AFTER_S + 1)
        with open_run(archive, SPEC, resume=run.run_id):
            row = archive.get_run(run.run_id)
            assert (row["host"], row["pid"]) == (socket.gethostname(), os.getpid())


def test_staleness_is_judged_at_the_clock_given(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with open_run(archive, SPEC) as run:
            pass
        _owned_by_another_session(archive, run.run_id, age_s=0)
        later = datetime.now(timezone.utc) + timedelta(seconds=STALE_AFTER_S + 5)
        with pytest.raises(LiveRun):
            open_run(archive, SPEC, resume=run.run_id)
        with open_run(archive, SPEC, resume=run.run_id, clock=lambda: later) as again:
            assert again.resumed


def test_a_run_whose_process_on_this_host_is_gone_resumes_at_once(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with open_run(archive, SPEC) as run:
            pass
        host = socket.gethostname()
        _owned_by_another_session(archive, run.run_id, age_s=0, host=host, pid=_dead_pid())
        assert live_reason(archive, archive.get_run(run.run_id)) is None
        _owned_by_another_session(archive, run.run_id, age_s=0, host=host, pid=os.getppid())
        assert "last heartbeat" in live_reason(archive, archive.get_run(run.run_id))
        _owned_by_another_session(
            archive, run.run_id, age_s=STALE_AFTER_S + 1, host=host, pid=os.getppid()
        )
        assert live_reason(archive, archive.get_run(run.run_id)) is None  # a hung or reused pid


def test_runs_shows_a_run_nobody_runs_any_more_as_killed_or_stale_by_the_resume_rule(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with open_run(archive, SPEC) as run:
            pass

        def shown() -> str:
            (row,) = listed_runs(archive)
            return row["shown_status"]

        assert shown() == "finished"
        _owned_by_another_session(archive, run.run_id, age_s=STALE_AFTER_S - 30)
        assert shown() == "running"  # another host, a recent heartbeat: live
        _owned_by_another_session(archive, run.run_id, age_s=STALE_AFTER_S + 1)
        assert shown() == "stale"  # another host, silent: resumable, and said so
        host = socket.gethostname()
        _owned_by_another_session(archive, run.run_id, age_s=0, host=host, pid=_dead_pid())
        assert shown() == "killed"
        assert archive.get_run(run.run_id)["status"] == "running"  # listing writes nothing


def test_a_resume_of_another_methods_run_is_refused_naming_both(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with open_run(archive, SPEC) as run:
            pass
        grpo = RunSpec(method="grpo", task="drift", suite="smoke", config={})
        with pytest.raises(ArchiveError, match="is a run of method es, not grpo"):
            open_run(archive, grpo, resume=run.run_id)


def test_the_heartbeat_thread_refreshes_the_run_while_its_block_is_open(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with open_run(archive, SPEC, heartbeat_s=0.05) as run:
            archive.update_run(run.run_id, updated_at=_stamp(3600))
            deadline = time.monotonic() + 1.0
            while archive.get_run(run.run_id)["updated_at"] == _stamp(3600):
                assert time.monotonic() < deadline, "no heartbeat within a second"
                time.sleep(0.02)


def test_a_session_whose_run_was_taken_over_stops_beating(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with open_run(archive, SPEC) as run:
            assert run.beat()
            _owned_by_another_session(archive, run.run_id, age_s=0)
            assert not run.beat()
            run.finish("stopped", "taken over")


def test_an_error_leaving_the_block_records_the_run_as_failed_with_its_reason(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with pytest.raises(ValueError), open_run(archive, SPEC) as run:
            raise ValueError("the fit diverged")
        row = archive.get_run(run.run_id)
        assert row["status"] == "failed" and row["stop_reason"] == "ValueError: the fit diverged"
        assert row["error"] == row["stop_reason"] and row["ended_at"]
        with pytest.raises(KeyboardInterrupt), open_run(archive, SPEC) as stopped:
            raise KeyboardInterrupt
        assert archive.get_run(stopped.run_id)["status"] == "interrupted"


def test_finish_writes_the_methods_final_columns_and_the_reason(tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        with open_run(archive, SPEC) as run:
            run.final = lambda: {"elapsed_s": 12.5, "generation": 3}
            run.finish("stopped", "time budget of 10 s spent", generation=4)
        row = archive.get_run(run.run_id)
    assert (row["status"], row["stop_reason"]) == ("stopped", "time budget of 10 s spent")
    assert (row["elapsed_s"], row["generation"]) == (12.5, 4)


def test_the_run_log_is_appended_to_by_each_session(tmp_path):
    path = tmp_path / "metarl.db"
    with Archive(path) as archive:
        with open_run(archive, SPEC) as run:
            assert run.log_path == tmp_path / "metarl-logs" / f"{run.run_id}.log"
        first = run.log_path.read_text()
        with open_run(archive, SPEC, resume=run.run_id):
            pass
        second = run.log_path.read_text()
    assert f"run {run.run_id} (es) started" in first and f"run {run.run_id} finished" in first
    assert second.startswith(first) and f"run {run.run_id} (es) resumed" in second


# -- every method --------------------------------------------------------------------------------


def _discovery(archive: Archive, resume: str | None = None):
    from metarl.discovery.config import DiscoverConfig
    from metarl.discovery.loop import DiscoveryLoop
    from metarl.discovery.proposers import make_proposer

    config = DiscoverConfig(suite="smoke", seeds=1, timesteps=8192, max_time=None).resolved()
    loop = DiscoveryLoop(
        archive, config, make_proposer("mutation", config), resume=resume, on_event=_interrupt
    )
    with pytest.raises(KeyboardInterrupt):  # the display's first event stops it
        loop.run()
    return loop.run_id or resume


class _NoEvaluator:
    """An ES evaluator that is never asked to score (the run stops before)."""

    def close(self) -> None:
        pass


def _es(archive: Archive, resume: str | None = None) -> str:
    from metarl.blackbox.config import ESConfig
    from metarl.blackbox.es import ESRun

    config = ESConfig(suite="smoke", population=4, generations=3, hidden=8, timesteps=8192)
    run = ESRun(
        config,
        archive,
        resume=resume,
        on_event=_interrupt,
        evaluator_factory=lambda settings: _NoEvaluator(),
    )
    result = run.run()
    assert result.status == "interrupted"
    return result.run_id


def _grpo(archive: Archive, resume: str | None = None) -> str:
    from metarl.grpo.settings import GRPOSettings
    from metarl.grpo.train import ProposerTraining

    settings = GRPOSettings(
        model="tiny/not-downloaded", suite="smoke", output_dir=str(archive.path.parent / "p")
    ).resolved()
    result = ProposerTraining(settings, archive, resume=resume, on_event=_interrupt).run()
    assert result.status == "interrupted"
    return result.run_id


METHODS = {"discovery": _discovery, "es": _es, "grpo": _grpo}
RESUME_COMMANDS = {
    "discovery": ("resume", "{run}"),
    "es": ("es", "--resume", "{run}"),
    "grpo": ("train-proposer", "--resume", "{run}"),
}


@pytest.mark.parametrize("method", METHODS)
def test_resuming_a_live_run_of_each_method_is_refused_and_a_stale_one_resumes(method, tmp_path):
    start = METHODS[method]
    with Archive(tmp_path / "metarl.db") as archive:
        run_id = start(archive)
        assert archive.get_run(run_id)["method"] == method
        _owned_by_another_session(archive, run_id, age_s=5)
        with pytest.raises(LiveRun, match=f"run {run_id} is still running"):
            start(archive, resume=run_id)
        assert archive.get_run(run_id)["pid"] == 4242  # refused before anything was written
        _owned_by_another_session(archive, run_id, age_s=STALE_AFTER_S + 1)
        assert start(archive, resume=run_id) == run_id
        row = archive.get_run(run_id)
    assert (row["host"], row["pid"], row["status"]) == (
        socket.gethostname(),
        os.getpid(),
        "interrupted",
    )


@pytest.mark.parametrize("method", METHODS)
def test_each_methods_run_log_exists_and_grows_with_a_resume(method, tmp_path):
    start = METHODS[method]
    path = tmp_path / "metarl.db"
    with Archive(path) as archive:
        run_id = start(archive)
        log = run_log_path(path, run_id)
        size = log.stat().st_size
        start(archive, resume=run_id)
    text = log.read_text()
    assert log.stat().st_size > size
    assert f"run {run_id} ({method}) started" in text and f"run {run_id} ({method}) resumed" in text


@pytest.mark.parametrize("method", METHODS)
def test_a_refused_resume_on_the_command_line_is_one_line(method, tmp_path):
    path = tmp_path / "metarl.db"
    with Archive(path) as archive:
        run_id = METHODS[method](archive)
        _owned_by_another_session(archive, run_id, age_s=5)
    args = [a.format(run=run_id) for a in RESUME_COMMANDS[method]]
    result = invoke(*args, "--archive", str(path))
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and f"run {run_id} is still running" in lines[0], result.stderr


def test_runs_and_show_say_where_a_runs_log_is(tmp_path):
    path = tmp_path / "metarl.db"
    with Archive(path) as archive:
        with open_run(archive, SPEC) as run:
            pass
    log = str(tmp_path / "metarl-logs" / f"{run.run_id}.log")
    shown = invoke("show", run.run_id, "--archive", str(path))
    assert shown.exit_code == 0 and "finished" in shown.stdout
    assert log in shown.stdout.replace("\n", "")
    listed = invoke("runs", "--archive", str(path))
    assert listed.exit_code == 0 and "metarl-logs" in listed.stdout


# -- derived runs: no resume; their log, finish and fail ----------------------------------------


class _Sampler:
    """The evaluator a derivation uses: samples the teacher, scores nothing (fails the
    student at the static stage)."""

    def __enter__(self) -> "_Sampler":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def sample(self, code, task, points, epsilon):
        return "samples"

    def evaluate_batch(self, codes, task):
        return [Outcome.failure("static", "not scored here") for _ in codes]


def _teacher(archive: Archive) -> str:
    teacher = Teacher(
        "seed",
        "def drift(ratio, advantage, epsilon):\n    return 0.0 * ratio\n",
        "drift",
        "smoke",
        1,
        4500,
        None,
    )
    _, cid = record_derived(
        archive,
        method="discovery",
        teacher=teacher,
        code=teacher.code,
        outcome=Outcome.failure("probes", "not scored here"),
        settings=teacher_settings(teacher),
        name="teacher",
        thought="",
        meta={},
        config={},
        seconds=0.0,
    )
    return cid


@pytest.mark.parametrize("method", ["distil", "symbolic"])
def test_a_derived_run_is_finished_with_its_candidate_and_logged(method, tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        teacher = _teacher(archive)
        result = derive(
            archive,
            teacher,
            method,
            lambda teacher, samples: Student("def drift(r, a, e):\n    return r\n", "s", "", {}),
            points=4,
            epsilon=0.2,
            config={},
            evaluator_factory=lambda settings: _Sampler(),
        )
        row = archive.get_run(result.run_id)
    assert (row["method"], row["status"], row["candidates_count"]) == (method, "finished", 1)
    text = run_log_path(tmp_path / "metarl.db", result.run_id).read_text()
    assert f"run {result.run_id} ({method}) started" in text
    assert f"run {result.run_id} finished (done)" in text


@pytest.mark.parametrize("method", ["distil", "symbolic"])
def test_a_derived_run_whose_fit_fails_is_recorded_failed_with_the_reason(method, tmp_path):
    def broken_fit(teacher, samples):
        raise ValueError("the fit diverged")

    with Archive(tmp_path / "metarl.db") as archive:
        teacher = _teacher(archive)
        with pytest.raises(ValueError, match="diverged"):
            derive(
                archive,
                teacher,
                method,
                broken_fit,
                points=4,
                epsilon=0.2,
                config={},
                evaluator_factory=lambda settings: _Sampler(),
            )
        row = archive.latest_run()
    assert (row["method"], row["status"]) == (method, "failed")
    assert row["stop_reason"] == "ValueError: the fit diverged"
    text = run_log_path(tmp_path / "metarl.db", row["id"]).read_text()
    assert f"run {row['id']} failed (ValueError: the fit diverged)" in text
