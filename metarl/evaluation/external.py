"""Another project's harness run on candidate code, inside metarl's sandbox and limits.

metarl's own workers speak a private protocol (sandbox.py); an external harness (DiscoGen's
`run_main.py`) is a plain command that imports the candidate's module and prints its result.
It gets the same isolation as a tracer, the role that runs candidate Python: bubblewrap with
no network, no devices, read-only binds of the system, the harness's interpreter and its
task folder, a size-capped tmpfs as its only writable place, the scrubbed environment (no
keys), the seccomp filter, and the limits of `SandboxLimits`: the wall clock (the whole
process group killed), resident memory (the parent's watchdog) and RLIMIT_AS, RLIMIT_CPU,
RLIMIT_FSIZE (its output included), RLIMIT_NOFILE, no core files, and the process cap. It
runs with XLA's default flags, not the compile flags metarl sets for its own trainer: measured
on DiscoGen's tiny Breakout task, those flags changed its result (return 2.56 against 2.08),
and a harness's numbers must be the ones its authors get.

The harness's own result is read from its stdout after it exits; what the candidate prints
shares that stream, so a caller takes only a line in the harness's own format and treats it
as the candidate's claim about itself, checked against the base run of the same harness.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from metarl.evaluation.isolation import (
    SANDBOX_HOME,
    Mounts,
    bubblewrap_argv,
    bwrap_binary,
    read_only_paths,
    scrubbed_environment,
)
from metarl.evaluation.os_limits import (
    ProcessLimit,
    process_group_alive,
    process_limit,
    seccomp_pipe,
    tree_rss_mb,
)
from metarl.evaluation.settings import SandboxLimits

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExternalRun:
    """How one sandboxed command ended.

    Attributes:
        returncode: its exit status (negative: killed by that signal), None if never reaped.
        stdout, stderr: the last `SandboxLimits.output_chars` characters of each.
        seconds: wall-clock time from start to exit.
        stopped: the limit that stopped it ("wall-clock limit of 900 s", "resident memory
            above 8192 MB"), or None when it exited by itself.
        isolation: "bubblewrap" or "none (unsafe_no_sandbox)".
    """

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    stopped: str | None
    isolation: str


def harness_environment(home: str) -> dict:
    """The command's environment: the scrubbed one, JAX on the CPU, XLA's own defaults, and
    neither metarl's venv nor its module path."""
    environment = scrubbed_environment(home) | {"JAX_PLATFORMS": "cpu"}
    for name in ("XLA_FLAGS", "VIRTUAL_ENV", "PYTHONPATH"):
        environment.pop(name, None)
    return environment


def run_sandboxed(
    argv: Sequence[str],
    workdir: Path,
    read_only: Sequence[str],
    limits: SandboxLimits,
) -> ExternalRun:
    """Run `argv` in `workdir` (bound read-only) inside the sandbox, under `limits`.

    Args:
        argv: the command (its interpreter must be under one of `read_only`).
        workdir: the folder the command starts in; it sees it read-only at the same path.
        read_only: host paths the command needs besides the system's (an interpreter's
            prefixes), bound read-only at the same paths.
        limits: the wall clock, memory, CPU, file size and descriptor limits, and the tmpfs.

    Returns:
        How it ended (never raises for what the command did).

    Raises:
        SandboxUnavailable: bubblewrap is not installed (and `unsafe_no_sandbox` is off).
    """
    workdir = Path(workdir).resolve()
    private = tempfile.mkdtemp(prefix="metarl-external-")
    processes = ProcessLimit(process_limit())
    filter_fd = None
    start = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', str(workdir), *argv]
    try:
        if limits.unsafe_no_sandbox:
            environment = harness_environment(private)
            command, isolation = processes.prefix() + start, "none (unsafe_no_sandbox)"
        else:
            inside = harness_environment(SANDBOX_HOME)
            filter_fd = seccomp_pipe()
            binds = tuple(dict.fromkeys([*read_only_paths(), *map(str, read_only), str(workdir)]))
            mounts = Mounts(
                binary=bwrap_binary(),
                read_only=tuple(p for p in binds if os.path.exists(p)),
                tmpfs_mb=int(limits.tmpfs_mb),
                seccomp_fd=filter_fd,
            )
            prefix = bubblewrap_argv(mounts, "tracer", None, inside)
            command, environment, isolation = processes.prefix() + prefix + start, {}, "bubblewrap"
        return _supervise(command, environment, filter_fd, private, limits, isolation)
    finally:
        if filter_fd is not None:
            os.close(filter_fd)
        processes.release()
        shutil.rmtree(private, ignore_errors=True)


def _supervise(
    command: list[str],
    environment: dict,
    filter_fd: int | None,
    private: str,
    limits: SandboxLimits,
    isolation: str,
) -> ExternalRun:
    """Start `command`, enforce the wall clock and memory, and collect its output."""
    out_path, err_path = os.path.join(private, "stdout"), os.path.join(private, "stderr")
    rlimits = _rlimits(limits)
    started = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=private,
            env=environment,
            pass_fds=() if filter_fd is None else (filter_fd,),
            start_new_session=True,
            close_fds=True,
            preexec_fn=lambda: [resource.setrlimit(k, v) for k, v in rlimits],  # noqa: PLW1509
        )
    stopped = None
    deadline = started + float(limits.timeout_s)
    while proc.poll() is None:
        if time.perf_counter() > deadline:
            stopped = f"wall-clock limit of {limits.timeout_s:g} s"
        elif tree_rss_mb(proc.pid) > limits.memory_mb:
            stopped = f"resident memory above {limits.memory_mb} MB"
        if stopped:
            _kill_group(proc)
            break
        time.sleep(limits.memory_poll_s)
    seconds = time.perf_counter() - started
    returncode = proc.wait()
    _kill_group(proc)  # what the command left running in its group
    if stopped:
        logger.warning("external command stopped: %s", stopped)
    return ExternalRun(
        returncode,
        _tail(out_path, limits.output_chars),
        _tail(err_path, limits.output_chars),
        seconds,
        stopped,
        isolation,
    )


def _rlimits(limits: SandboxLimits) -> list[tuple[int, tuple[int, int]]]:
    """The resource limits the command starts under (inherited by everything it starts)."""
    memory = int(limits.memory_mb) * 2**20
    size = int(limits.max_file_mb) * 2**20
    return [
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_CPU, (limits.cpu_limit(), limits.cpu_limit())),
        (resource.RLIMIT_FSIZE, (size, size)),
        (resource.RLIMIT_NOFILE, (int(limits.nofile), int(limits.nofile))),
        (resource.RLIMIT_CORE, (0, 0)),
    ]


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the command's process group and wait until none of it is left."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait()
    for _ in range(200):
        if not process_group_alive(proc.pid):
            return
        time.sleep(0.05)
    logger.error("process group %d still alive after SIGKILL", proc.pid)


def _tail(path: str, chars: int) -> str:
    """The last `chars` characters of a captured stream (undecodable bytes replaced)."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - 4 * chars))
        return handle.read().decode("utf-8", "replace")[-chars:]
