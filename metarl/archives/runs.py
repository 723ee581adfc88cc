"""The run lifecycle every method shares: create a run, or take over a stopped one, heartbeat
while it works, write its log, and record how it ended.

Discovery, ES, distillation, symbolic regression and GRPO each used to write their own create,
mark-running, finish and resume, and only discovery refused to resume a run that was still
running: two `--resume r3` at once would both write run r3. Here there is one path:

    with open_run(archive, spec, resume=None or "r3", check=...) as run:
        ...                         work; run.save(...) writes columns (and is a heartbeat)
        run.finish("stopped", "time budget spent")
    # an exception that leaves the block records the run as failed with its reason,
    # Ctrl-C as interrupted; a block that ends without finish() records it as finished

While the block is open a daemon thread touches the run's `updated_at` every
HEARTBEAT_EVERY_S seconds, and the `metarl` logger's records are appended to the run's log,
`<archive stem>-logs/<run>.log` beside the archive (`metarl.logs.run_log_path`).

A resume is refused (`LiveRun`) while the run is live:

- its status is `running`, and
- on this host: its process is alive (and, for this very process, the run is open here);
  on another host (where no process can be asked): its last heartbeat is younger than
  STALE_AFTER_S.

A run that dies of a failing archive write (an `ArchiveFault`: a full disk, a held lock) is
recorded as failed with the reason "archive write failed: database or disk is full" when that
last write goes through, and the error it raises names the run, what its row now says, and the
command that resumes it (`fault_of_run`): with the disk still full the row still says running,
and a resume takes it over all the same, since its process is gone.

STALE_AFTER_S is 120 s: a live run writes a heartbeat every 15 s, but a write may wait up to
the archive's 60 s busy timeout behind another writer, so a live run's heartbeat can be up to
~75 s old; 120 s leaves room for that without ever calling a live run stale, while a run whose
machine died is resumable two minutes later. A same-host run whose process is gone (SIGKILL,
a crash) is resumable at once, whatever its heartbeat says; one whose process id is alive but
whose heartbeat is stale (a reused process id, a hung process) is resumable too.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from metarl.archives.columns import now
from metarl.archives.faults import ArchiveFault, ArchiveFull
from metarl.archives.store import Archive, ArchiveError, pid_alive
from metarl.logs import log_to_file, run_log_path

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 15.0
STALE_AFTER_S = 120.0
INTERRUPTED = "interrupted (Ctrl-C); resume continues here"
# method -> the command that resumes one of its runs ({run}: its id); a method not named here
# (a derivation: distil, symbolic) has no resume
RESUME_COMMANDS = {
    "discovery": "metarl resume {run}",
    "es": "metarl es --resume {run}",
    "grpo": "metarl train-proposer --resume {run}",
}

RESUME_TIME_S = 1800.0  # what a time-stopped run's "continue with" line adds to its time spent


def raised_time_budget(elapsed_s: float) -> str:
    """The `--max-time` option that lets a run stopped by its wall-time budget go on.

    Budgets count over all of a run's sessions, so resuming with the same (or a fixed) cap
    would stop again at once; this one is RESUME_TIME_S past the time already spent, in whole
    minutes.
    """
    return f"--max-time {math.ceil((elapsed_s + RESUME_TIME_S) / 60)}m"


Clock = Callable[[], datetime]
# runs whose session block is open in this process, as (archive file, run id): a run whose row
# names this process is live only while it is open here (an in-process caller may reopen one
# it left behind)
_OPEN: set[tuple[str, str]] = set()
_OPEN_LOCK = threading.Lock()


class LiveRun(ArchiveError):
    """A resume refused: the run is still running (one line for the user)."""


def failure_reason(error: BaseException | str) -> str:
    """The reason a run that died of `error` is recorded with.

    Args:
        error: what ended it, or the reason itself.

    Returns:
        "archive write failed: <SQLite's message>" for a full disk, "archive error: <SQLite's
        message>" for another archive fault, else "Type: message".
    """
    if isinstance(error, ArchiveFull):
        return f"archive write failed: {error.reason}"
    if isinstance(error, ArchiveFault):
        return f"archive error: {error.reason}"
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return str(error)


def fault_of_run(error: ArchiveFault, run_id: str, method: str, recorded: bool) -> ArchiveFault:
    """The error to raise when run `run_id` died of archive fault `error`: the same kind of
    fault, saying which run stopped, what its row says now, and how to go on.

    Args:
        error: the fault that ended the run.
        run_id: the run.
        method: its method (which command resumes it: RESUME_COMMANDS).
        recorded: whether the run's row could be marked failed; if not (the disk is still
            full) it still says running, which a resume takes over once the process is gone.

    Returns:
        A fault of `error`'s class, with `error`'s reason, raised `from error` by the caller.
    """
    reason = failure_reason(error)
    command = RESUME_COMMANDS.get(method)
    if command is None:
        after = "then run it again (a derived run has no resume)"
    else:
        after = f"then `{command.format(run=run_id)}`"
    if recorded:
        message = f"run {run_id} failed: {reason}"
    else:
        message = (
            f"run {run_id} stopped: {reason}; its row still says running (the archive refused "
            "to record the failure too)"
        )
        if command is not None:
            after += ", which takes over a run whose process is gone"
    return type(error)(message, reason=error.reason, hint=f"{error.remedy}, {after}")


@dataclass(frozen=True)
class RunSpec:
    """What a method says about its run.

    Attributes:
        method: the archive's `method` value ("discovery", "es", "grpo", ...).
        task, suite: what the run learns and where.
        config: the method's options, as stored (a resume keeps the stored ones unless
            `changeable` has a new `config`).
        config_hash: the options a resume may not change, hashed (None: not checked here).
        versions, device: the libraries and machine the run writes with.
        proposer, mode, model, rng_seed: the run's labels (`rng_seed`, the search's RNG seed,
            is stored in the `runs.seed` column).
        state: the resumable state a new run starts with.
        changeable: columns a resume rewrites (budgets, a new config): written on creation too.
    """

    method: str
    task: str
    suite: str
    config: dict
    config_hash: str | None = None
    versions: dict | None = None
    device: str | None = None
    proposer: str | None = None
    mode: str | None = None
    model: str | None = None
    rng_seed: int | None = None
    state: dict | None = None
    changeable: dict = field(default_factory=dict)
    protocol: str | None = None  # the evaluation protocol's name (evaluation/protocols.py)

    def columns(self) -> dict:
        """The `runs` columns of a new run of this spec."""
        return {
            "method": self.method,
            "task": self.task,
            "suite": self.suite,
            "config": self.config,
            "config_hash": self.config_hash,
            "versions": self.versions,
            "device": self.device,
            "proposer": self.proposer,
            "mode": self.mode,
            "model": self.model,
            "protocol": self.protocol,
            "seed": self.rng_seed,  # the column's name since schema version 1
            "state": self.state,
            **self.changeable,
        }


def heartbeat_age(run: dict, at: datetime | None = None) -> float | None:
    """Seconds since run row `run`'s last write or heartbeat (`updated_at`); None if unknown."""
    stamp = run.get("updated_at") or run.get("started_at")
    if not stamp:
        return None
    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        logger.warning("run %s has an unreadable updated_at %r", run.get("id"), stamp)
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    return ((at or datetime.now(timezone.utc)) - then).total_seconds()


def live_reason(
    archive: Archive,
    run: dict,
    *,
    stale_after_s: float = STALE_AFTER_S,
    at: datetime | None = None,
) -> str | None:
    """Why run row `run` is live (may not be resumed), or None when it may be.

    Args:
        archive: the archive holding the run.
        run: its row (`Archive.get_run`).
        stale_after_s: a heartbeat older than this many seconds is stale.
        at: the time to judge at (default now; a test's clock).

    Returns:
        A phrase naming who runs it and its heartbeat's age, or None.
    """
    if run.get("status") != "running":
        return None
    pid, host = run.get("pid"), run.get("host")
    here = socket.gethostname()
    if host == here and pid == os.getpid():
        with _OPEN_LOCK:
            if (str(archive.path), run["id"]) in _OPEN:
                return f"open in this process, pid {pid}"
        return None
    if host == here and not pid_alive(pid):
        return None  # its process is gone (killed, crashed): resumable at once
    age = heartbeat_age(run, at)
    if age is not None and age >= stale_after_s:
        logger.info(
            "run %s's last heartbeat is %.0f s old (stale after %.0f s): resumable",
            run["id"],
            age,
            stale_after_s,
        )
        return None
    beat = f"last heartbeat {age:.0f} s ago" if age is not None else "no heartbeat recorded"
    return f"pid {pid} on {host or 'an unknown host'}, {beat}"


def shown_status(archive: Archive, run: dict, at: datetime | None = None) -> str:
    """What run row `run` is, for a person: its stored status, except that a "running" run
    nobody runs any more is "killed" (its process on this host is gone) or "stale" (its
    heartbeat, from another host or a hung process, is older than STALE_AFTER_S): the same
    rule `open_run` resumes by.

    Args:
        archive: the archive holding the run.
        run: its row.
        at: the time to judge at (default now; a test's clock).

    Returns:
        "killed", "stale" or the stored status.
    """
    status = run.get("status") or ""
    if status != "running" or live_reason(archive, run, at=at) is not None:
        return status
    if run.get("host") == socket.gethostname() and not pid_alive(run.get("pid")):
        return "killed"
    return "stale"


def listed_runs(archive: Archive, at: datetime | None = None) -> list[dict]:
    """`Archive.runs()` with each row's `shown_status` (see `shown_status`)."""
    rows = archive.runs()
    for row in rows:
        row["shown_status"] = shown_status(archive, row, at)
    return rows


class RunSession:
    """One session of a run: its id, the row it opened with, its heartbeat and its log.

    Made by `open_run`; use it as a context manager (the heartbeat and the log live while the
    block is open), then `finish` or `fail` it; leaving the block records what `finish` was
    not told (see the module docstring).

    Attributes:
        archive: the archive.
        run_id: the run.
        method: its method.
        resumed: whether this session took over a stored run.
        row: the run's row as it was stored before this session (a resume's state, config).
        log_path: where the run's log is appended.
        final: `final() -> columns` written with the run's end (elapsed time, state); set by
            the method.
    """

    def __init__(
        self,
        archive: Archive,
        run_id: str,
        method: str,
        row: dict,
        *,
        resumed: bool,
        heartbeat_s: float = HEARTBEAT_EVERY_S,
    ):
        self.archive = archive
        self.run_id = run_id
        self.method = method
        self.row = row
        self.resumed = resumed
        self.log_path: Path = run_log_path(archive.path, run_id)
        self.final: Callable[[], dict] = dict
        self.ended: str | None = None  # the status it ended with, once recorded
        self._heartbeat_s = heartbeat_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._exits = ExitStack()
        self._lost = False

    @property
    def _key(self) -> tuple[str, str]:
        return (str(self.archive.path), self.run_id)

    # -- the session's block -----------------------------------------------------------------
    def __enter__(self) -> "RunSession":
        with _OPEN_LOCK:
            _OPEN.add(self._key)
        self._exits.enter_context(log_to_file(self.log_path))
        verb = "resumed" if self.resumed else "started"
        logger.info(
            "run %s (%s) %s by pid %d on %s; log %s",
            self.run_id,
            self.method,
            verb,
            os.getpid(),
            socket.gethostname(),
            self.log_path,
        )
        self._thread = threading.Thread(
            target=self._beat_until_stopped, name=f"heartbeat-{self.run_id}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        """Record what `finish` was not told; an archive fault leaving the block is raised
        again as `fault_of_run` says (naming the run and what its row says).

        Raises:
            ArchiveFault: the block ended with one (the same kind, saying how to go on).
        """
        try:
            if self.ended is None:
                if error is None:
                    self.finish("finished", "done")
                elif isinstance(error, KeyboardInterrupt):
                    self.finish("interrupted", INTERRUPTED)
                else:
                    recorded = self.fail(error)
                    if isinstance(error, ArchiveFault):
                        raise fault_of_run(error, self.run_id, self.method, recorded) from error
        finally:
            self._release()
            self._exits.close()

    # -- writing the run's row ---------------------------------------------------------------
    def save(self, **columns) -> None:
        """Write `columns` to the run's row (its `updated_at` too: a heartbeat)."""
        self.archive.update_run(self.run_id, **columns)

    def beat(self) -> bool:
        """Touch the run's `updated_at` if this session still owns it.

        Returns:
            Whether it did (False: another session took the run over, or it ended).
        """
        with self.archive.transaction():
            cursor = self.archive.conn.execute(
                "UPDATE runs SET updated_at = ? WHERE id = ? AND status = 'running' "
                "AND pid = ? AND host = ?",
                (now(), self.run_id, os.getpid(), socket.gethostname()),
            )
        owned = cursor.rowcount > 0
        if not owned and not self._lost and self.ended is None:
            self._lost = True
            logger.warning(
                "run %s is no longer this session's (taken over after a stale heartbeat, or "
                "ended elsewhere); its heartbeat stops",
                self.run_id,
            )
        return owned

    def finish(self, status: str, reason: str, **columns) -> bool:
        """Record how this session ended; best effort (logged, never raised).

        Args:
            status: finished | stopped | interrupted | failed.
            reason: why, in one line.
            columns: more columns to write (they override `final()`'s).

        Returns:
            Whether the row was written.
        """
        self._stop_heartbeat()
        fields = {**self._final_columns(), **columns}
        written = self.archive.finish_run(self.run_id, status, reason, **fields)
        self.ended = status
        if written:
            log = logger.warning if status == "failed" else logger.info
            log("run %s %s (%s)", self.run_id, status, reason)
        else:  # finish_run logged why (a full disk)
            logger.warning(
                "run %s %s (%s), but its row still says running", self.run_id, status, reason
            )
        self._release()
        return written

    def fail(self, error: BaseException | str, **columns) -> bool:
        """Record the run as failed, its reason (also its `error`) as `failure_reason` says:
        `Type: message`, or "archive write failed: ..." for a full disk.

        Returns:
            Whether the row was written (not when the archive still refuses writes).
        """
        reason = failure_reason(error)
        return self.finish("failed", reason, **{"error": reason, **columns})

    # -- plumbing ----------------------------------------------------------------------------
    def _final_columns(self) -> dict:
        try:
            return dict(self.final())
        except Exception:  # the end is still recorded, without the method's last numbers
            logger.exception("run %s: its final columns could not be computed", self.run_id)
            return {}

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            try:
                if not self.beat():
                    return
            except ArchiveError as error:  # a busy or full disk: the next beat tries again
                logger.warning("run %s: heartbeat not written: %s", self.run_id, error)
            except Exception:  # not the archive's: its traceback, and the next beat tries again
                logger.warning("run %s: heartbeat not written", self.run_id, exc_info=True)

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _release(self) -> None:
        self._stop_heartbeat()
        with _OPEN_LOCK:
            _OPEN.discard(self._key)


def open_run(
    archive: Archive,
    spec: RunSpec,
    *,
    resume: str | None = None,
    check: Callable[[dict], None] | None = None,
    stale_after_s: float = STALE_AFTER_S,
    clock: Clock | None = None,
    heartbeat_s: float = HEARTBEAT_EVERY_S,
) -> RunSession:
    """A new run of `spec`, or (with `resume`) stored run `resume` taken over by this process.

    Args:
        archive: where the run is.
        spec: the method's description of its run.
        resume: the run to continue, or None for a new one.
        check: `check(row)` raises the method's own error when the stored run cannot be
            continued with this spec (other options, no resumable state); called after the
            liveness check, before anything is written.
        stale_after_s: a heartbeat older than this is stale (see the module docstring).
        clock: the time to judge staleness at (default: now).
        heartbeat_s: seconds between heartbeats while the session's block is open.

    Returns:
        The session, not yet entered: `with open_run(...) as run:`.

    Raises:
        ArchiveError: no run `resume`, or it is another method's.
        LiveRun: run `resume` is still running.
    """
    if resume is None:
        run_id = archive.create_run(**spec.columns())
        return RunSession(
            archive,
            run_id,
            spec.method,
            archive.get_run(run_id),
            resumed=False,
            heartbeat_s=heartbeat_s,
        )
    with archive.transaction():  # judged and taken in one write: two resumes never both win
        row = archive.get_run(resume)
        method = row.get("method") or "discovery"
        if method != spec.method:
            raise ArchiveError(
                f"run {resume} is a run of method {method}, not {spec.method}",
                hint=f"resume it with the --resume option of the command that runs {method}",
            )
        at = clock() if clock is not None else None
        why = live_reason(archive, row, stale_after_s=stale_after_s, at=at)
        if why is not None:
            raise LiveRun(
                f"run {resume} is still running ({why})",
                hint=f"stop it first, or resume it once its heartbeat is {stale_after_s:.0f} s old",
            )
        if check is not None:
            check(row)
        archive.update_run(
            resume,
            status="running",
            stop_reason=None,
            ended_at=None,
            error=None,
            pid=os.getpid(),
            host=socket.gethostname(),
            **spec.changeable,
        )
    return RunSession(archive, resume, spec.method, row, resumed=True, heartbeat_s=heartbeat_s)
