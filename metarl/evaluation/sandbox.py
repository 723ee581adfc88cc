"""The sandbox: untrusted candidates run in a separate, limited, disposable worker process.

Design (measured on a 2-core CPU: importing jax+gymnax+metarl costs ~3 s, compiling PPO 5-13 s):

- **One fresh process per candidate.** A worker is `python -m metarl.evaluation.worker`, started
  in its own session (`start_new_session=True`, so its process group is the whole tree it can
  create). It runs exactly one job and is then killed: no candidate can leave state (patched
  modules, caches, threads, memory) that another candidate's score would see. `fork` after
  importing jax is unsafe (XLA's threads), so workers are spawned, never forked.
- **Pre-warmed.** A worker imports jax and metarl and initialises the XLA backend *before* it
  receives its job, then reports `ready`; while no job is waiting it goes on importing the
  training stack (gymnax, flax, the trainer: ~2 s more), module by module, so a job that
  arrives early starts at once and a candidate that fails its probes never pays for gymnax.
  The pool (worker_pool.py) keeps `spares` such workers and starts a replacement as soon as
  one is taken, so the next candidate's import overlaps the current candidate's run. The
  visible per-candidate overhead is then the job hand-off and the teardown (kill + temp-dir
  removal), not the ~3 s import. A worker whose parent dies (or closes its stdin) removes its
  temp dir and exits.
- **Result channel.** Results travel as JSON lines on a private pipe whose write end is passed
  to the worker with `pass_fds`; the candidate's stdout/stderr go to files in the worker's temp
  dir and come back truncated (Outcome.stdout). Nothing a candidate prints can be read as a
  result.
- **Limits** (applied by the worker to itself before importing anything, see worker.py):
  RLIMIT_AS = memory_mb (XLA:CPU reserves ~2 GB of address space, measured, so the default
  8 GB leaves room; skipped when a CUDA plugin is installed since CUDA reserves far more), plus a
  resident-memory watchdog here in the parent that kills the tree above memory_mb (the only
  memory limit on GPU); RLIMIT_CPU = cpu_s (default: timeout x cores + 60 s); RLIMIT_FSIZE =
  max_file_mb (a candidate printing more kills its worker with SIGXFSZ); RLIMIT_NOFILE;
  RLIMIT_MSGQUEUE = 0; no core dumps; at most `process_limit()` processes and threads (264 on
  2 cores; os_limits.py). The wall clock is enforced here: after `timeout_s` the whole process
  group gets SIGKILL (SIGALRM cannot interrupt XLA), and we wait until no process of it is left.
- **OS isolation: bubblewrap** (isolation.py, os_limits.py): new namespaces, an unprivileged
  uid, no capabilities, read-only binds of the interpreter, the venv and metarl only, no
  network, writable only size-capped tmpfs mounts, `/dev/nvidia*` and the compilation cache
  (read-only, plus a staging directory: xla_cache.py) for trainers only, a scrubbed
  environment. Killing the worker's process group kills its PID namespace. Without bwrap,
  candidate code does not run, unless the loudly named `unsafe_no_sandbox` opt-out is given
  (rlimit/netns/socket-stub isolation only, reported in `Outcome.sandbox`).
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from metarl.evaluation.isolation import (  # noqa: F401 - re-exported for existing callers
    BWRAP,
    CACHE_ENVVAR,
    SANDBOX_CACHE,
    SANDBOX_HOME,
    SandboxUnavailable,
    bubblewrap_command,
    check_bubblewrap,
    launch,
    scrubbed_environment,
)
from metarl.evaluation.os_limits import (  # noqa: F401 - re-exported for existing callers
    ProcessLimit,
    process_group_alive,
    process_limit,
    tree_rss_mb,
    tree_tasks,
)
from metarl.evaluation.settings import SandboxLimits
from metarl.evaluation.xla_cache import Staging

logger = logging.getLogger(__name__)
# The longest channel line the parent accepts. The largest honest message, a full run's
# per-update returns with its artifact, is well under 1 MB; a longer line is garbled output,
# dropped while it streams (a 64 MB forged line costs the parent no more than its reading).
MAX_MESSAGE_BYTES = 16 << 20
TICK = {"event": "tick"}  # what `on_event` sees while no message arrives (WorkerProcess.run)


@dataclass
class WorkerResult:
    """What came back from one worker job."""

    status: str  # "ok" | "timeout" | "died" | "memory" | "stopped" | "startup"
    result: dict | None = None  # the worker's final message (only when status == "ok")
    stage: str = "probes"  # the last stage the worker announced
    reason: str | None = None  # why there is no result (status != "ok")
    returncode: int | None = None
    output: str = ""  # the worker's stdout/stderr, truncated
    ready_info: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    workdir: str = ""  # the worker's temp dir (removed by the time this is returned)
    pid: int | None = None
    cache_committed: int = 0  # compilation cache entries the parent committed (a trainer's)


def _signal_name(returncode: int | None) -> str:
    if returncode is None or returncode >= 0:
        return f"exit status {returncode}"
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _parse_message(line: bytes) -> dict | None:
    """One channel line as a message dict; anything but a JSON object becomes `garbled`."""
    if not line.strip():
        return None
    try:
        message = json.loads(line)
    except ValueError:
        message = None
    if not isinstance(message, dict):  # a forged `[1, 2]`, `42` or broken JSON: not a message
        return {"event": "garbled", "line": line[:200].decode("utf-8", "replace")}
    return message


class WorkerProcess:
    """One disposable worker: spawned pre-warmed, runs one job, then killed with its group."""

    def __init__(
        self,
        limits: SandboxLimits,
        python: str | None = None,
        role: str = "trainer",
        device: str | None = None,
    ):
        """Args:
        limits: the worker's limits.
        python: the interpreter (default: this one).
        role: "tracer" (runs candidate Python, or checks artifacts; no device, no cache) or
            "trainer" (never runs candidate Python).
        device: the only accelerator a trainer may see (its CUDA_VISIBLE_DEVICES, and the
            only GPU node bound); None: whatever this process sees.
        """
        self.limits = limits
        self.role = role
        self.device = device
        # the parent's own directory for this worker: its captured output, never visible inside
        self.tmpdir = tempfile.mkdtemp(prefix="metarl-sandbox-")
        self.read_fd, write_fd = os.pipe()
        self.stdout_path = os.path.join(self.tmpdir, "stdout.txt")
        self.stderr_path = os.path.join(self.tmpdir, "stderr.txt")
        self.spawned_at = time.perf_counter()
        self.ready_at: float | None = None
        self.ready_info: dict = {}
        self._buffer = bytearray()
        self._overflow = False  # inside a line past MAX_MESSAGE_BYTES
        self._closed = False
        self._kill_lock = threading.Lock()
        self.pgid: int | None = None
        self.processes = ProcessLimit(process_limit())
        self._limit_reason: str | None = None  # set when the watchdog kills the tree
        self._commit_cache = False  # set by `run` when the job finished with a result
        self.cache_committed = 0
        command = [
            python or sys.executable,
            *(["-P"] if sys.version_info >= (3, 11) else []),
            "-m",
            "metarl.evaluation.worker",
            "--role",
            role,
            "--result-fd",
            str(write_fd),
            "--memory-mb",
            str(int(limits.memory_mb)),
            "--cpu-s",
            str(limits.cpu_limit()),
            "--max-file-mb",
            str(int(limits.max_file_mb)),
            "--nofile",
            str(int(limits.nofile)),
        ]
        cache = limits.compilation_cache if role == "trainer" else None
        # a trainer reads the cache and writes only its own staging directory (xla_cache.py)
        self.staging = Staging(cache, os.path.join(self.tmpdir, "xla")) if cache else None
        staging = str(self.staging.path) if self.staging else None
        try:
            spec = launch(command, limits, role, device, self.tmpdir, staging, self.processes)
        except BaseException:  # SandboxUnavailable: nothing started, nothing to leave behind
            self.processes.release()
            os.close(write_fd)
            os.close(self.read_fd)
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            raise
        self.isolation, self._cache_inside = spec.isolation, spec.cache_inside
        command, environment, filter_fd = spec.command, spec.environment, spec.filter_fd
        cwd = self.tmpdir
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            try:
                self.proc = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    cwd=cwd,
                    env=environment,
                    pass_fds=(write_fd,) if filter_fd is None else (write_fd, filter_fd),
                    start_new_session=True,
                    close_fds=True,
                )
            except BaseException:
                self.processes.release()
                raise
            finally:
                os.close(write_fd)
                if filter_fd is not None:
                    os.close(filter_fd)
        self.pgid = self.proc.pid  # start_new_session: the worker leads its own group
        self.pid = self.proc.pid

    # -- reading the private channel ---------------------------------------------------------
    def _read_messages(self, timeout: float) -> tuple[list[dict], bool]:
        """Messages that arrive within `timeout` s, and whether the channel hit EOF."""
        messages: list[dict] = []
        try:
            ready, _, _ = select.select([self.read_fd], [], [], max(0.0, timeout))
            if not ready:
                return messages, False
            chunk = os.read(self.read_fd, 1 << 16)
        except (OSError, ValueError):  # closed under us (the pool is shutting down)
            return messages, True
        if not chunk:
            return messages, True
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            piece = chunk[start:] if newline < 0 else chunk[start:newline]
            if self._overflow:
                pass  # the rest of an over-long line: already reported, dropped unread
            elif len(self._buffer) + len(piece) > MAX_MESSAGE_BYTES:
                self._overflow = True
                head = bytes(self._buffer[:200])
                messages.append(
                    {
                        "event": "garbled",
                        "line": head.decode("utf-8", "replace"),
                        "reason": f"a line longer than {MAX_MESSAGE_BYTES} bytes",
                    }
                )
                self._buffer.clear()
            else:
                self._buffer += piece
            if newline < 0:
                break
            if not self._overflow:
                message = _parse_message(bytes(self._buffer))
                if message is not None:
                    messages.append(message)
            self._buffer.clear()
            self._overflow = False
            start = newline + 1
        return messages, False

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the worker has imported everything (or died / timed out)."""
        if self.ready_at is not None:
            return True
        deadline = time.perf_counter() + (
            timeout if timeout is not None else self.limits.startup_timeout_s
        )
        while time.perf_counter() < deadline:
            messages, eof = self._read_messages(min(0.5, deadline - time.perf_counter()))
            for message in messages:
                if message.get("event") == "ready":
                    self.ready_at = time.perf_counter()
                    self.ready_info = message
                    self.ready_info["processes"] = {
                        "limit": self.processes.limit,
                        "enforced_by": self.processes.mechanism,
                    }
                    return True
            if eof or self.proc.poll() is not None:
                return False
        return False

    def is_alive(self) -> bool:
        return not self._closed and self.proc.poll() is None

    def output(self) -> str:
        """The worker's stdout and stderr, truncated to limits.output_chars."""
        budget = self.limits.output_chars
        parts = []
        for name, path in (("stdout", self.stdout_path), ("stderr", self.stderr_path)):
            try:
                size = os.path.getsize(path)
                with open(path, "rb") as handle:
                    head = handle.read(budget // 2)
                    tail = b""
                    if size > budget:
                        handle.seek(max(budget // 2, size - budget // 2))
                        tail = handle.read(budget // 2)
            except OSError:
                continue
            text = head.decode("utf-8", "replace")
            if tail:
                text += f"\n... [{size - len(head) - len(tail)} bytes cut] ...\n" + tail.decode(
                    "utf-8", "replace"
                )
            if text.strip():
                parts.append(f"--- {name} ---\n{text}")
        return "\n".join(parts)

    # -- one job -------------------------------------------------------------------------------
    def run(
        self,
        job: dict,
        timeout_s: float,
        on_event: Callable[[dict], bool | None] | None = None,
    ) -> WorkerResult:
        """Hand `job` to the worker and wait for its result, at most `timeout_s` s of wall clock.

        `on_event(message)` sees every progress message, and `{"event": "tick"}` (made here,
        never read from the worker) whenever 0.1 s pass without one, so that the caller can
        enforce deadlines of its own while the job runs; returning True stops the worker at
        once (status "stopped"). The worker is always killed (with its process group) afterwards.
        """
        timings: dict = {}
        start_wait = time.perf_counter()
        if not self.wait_ready():
            output = self.output()
            self.kill()
            code = self.proc.returncode
            return WorkerResult(
                status="startup",
                reason=(
                    f"the sandbox worker failed to start ({_signal_name(code)}): {output[-1500:]}"
                ),
                output=output,
                workdir=self.tmpdir,
                pid=self.pid,
                returncode=code,
                timings={"wait_worker": time.perf_counter() - start_wait},
            )
        timings["wait_worker"] = time.perf_counter() - start_wait
        timings["worker_start"] = (self.ready_at or self.spawned_at) - self.spawned_at
        timings["import"] = float(self.ready_info.get("import_s", 0.0))

        result = WorkerResult(
            status="died",
            ready_info=dict(self.ready_info),
            timings=timings,
            workdir=self.tmpdir,
            pid=self.pid,
        )
        stage = job.get("first_stage", "probes")
        if self.staging is not None:  # the cache's entries as of now, read-only
            self.staging.link(self._cache_inside)
        started = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        deadline = started + timeout_s
        next_memory_check = started
        final = None
        eof = False
        while True:
            now = time.perf_counter()
            if now >= deadline:
                result.status = "timeout"
                result.reason = f"timed out after {timeout_s:g} s in stage {stage}"
                break
            if now >= next_memory_check:
                next_memory_check = now + self.limits.memory_poll_s
                rss = tree_rss_mb(self.pid)
                if rss > self.limits.memory_mb:
                    result.status = "memory"
                    result.reason = (
                        f"exceeded the memory limit of {self.limits.memory_mb} MB (resident "
                        f"{rss:.0f} MB) in stage {stage}"
                    )
                    break
                if self.processes.mechanism == "watchdog":
                    tasks = tree_tasks(self.pid)
                    if tasks > self.processes.limit:
                        self._limit_reason = (
                            f"exceeded the limit of {self.processes.limit} processes and "
                            f"threads ({tasks}) in stage {stage}"
                        )
                        break
            if eof:
                break
            messages, eof = self._read_messages(min(0.1, deadline - now))
            stop = False
            for message in messages:
                result.events.append(message)
                if message.get("event") == "stage":
                    stage = message.get("stage", stage)
                elif message.get("event") == "result":
                    final = message
                if on_event is not None and message.get("event") != "result":
                    if on_event(message):
                        stop = True
            if on_event is not None and not messages and final is None and on_event(dict(TICK)):
                stop = True
            if final is not None:
                result.status = "ok"
                result.result = final
                break
            if stop:
                result.status = "stopped"
                break
            if not messages and not eof and self.proc.poll() is not None:
                # exited: drain what is left of the channel, then stop
                messages, eof = self._read_messages(0.2)
                for message in messages:
                    result.events.append(message)
                    if message.get("event") == "result":
                        final = message
                if final is not None:
                    result.status = "ok"
                    result.result = final
                    break
                eof = True
        result.stage = stage
        timings["sandbox"] = time.perf_counter() - started
        teardown_start = time.perf_counter()
        if result.status == "died" and self._limit_reason is None:
            try:  # it is exiting on its own: let it, so that its exit status says why
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        result.output = self.output()
        self._commit_cache = result.status == "ok"  # a crashed or stopped trainer's: discarded
        self.kill()
        result.returncode = self.proc.returncode
        result.cache_committed = self.cache_committed
        timings["teardown"] = time.perf_counter() - teardown_start
        if result.status == "died":
            result.reason = self._limit_reason or self._death_reason(
                stage, result.returncode, result.output
            )
        return result

    def _death_reason(self, stage: str, returncode: int | None, output: str) -> str:
        if returncode is not None and returncode > 128 and self.isolation == "bubblewrap":
            returncode = 128 - returncode  # bwrap exits with 128 + N when its child dies of N
        name = _signal_name(returncode)
        limits = self.limits
        if returncode is not None and returncode < 0:
            sig = -returncode
            if sig == signal.SIGXCPU:
                return f"exceeded the CPU-time limit of {limits.cpu_limit()} s in stage {stage}"
            if sig == signal.SIGXFSZ:
                return (
                    f"wrote more than {limits.max_file_mb} MB of output in stage {stage} "
                    "(stdout/stderr are captured and limited)"
                )
        lowered = output.lower()
        if any(
            k in lowered
            for k in ("bad_alloc", "out of memory", "resource_exhausted", "memoryerror")
        ):
            return (
                f"the evaluator process ran out of memory (limit {limits.memory_mb} MB) and died "
                f"({name}) in stage {stage}"
            )
        tail = " ".join(output.strip().splitlines()[-3:])[-400:]
        return f"the evaluator process died ({name}) in stage {stage} without a result" + (
            f"; last output: {tail}" if tail else ""
        )

    def kill(self) -> None:
        """SIGKILL the worker's whole process group, reap it, commit (after a clean job) or
        discard its compilation cache entries, remove its temp dir."""
        with self._kill_lock:
            if self._closed:
                return
            self._closed = True
            self._kill()

    def _kill(self) -> None:
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.perf_counter() + 5
        while time.perf_counter() < deadline:
            try:
                os.killpg(self.pgid, 0)
            except ProcessLookupError:
                break
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                break
            if not process_group_alive(self.pgid):
                break
            time.sleep(0.05)
        for stream in (self.proc.stdin,):
            try:
                if stream and not stream.closed:
                    stream.close()
            except OSError:
                pass
        try:
            os.close(self.read_fd)
        except OSError:
            pass
        self.processes.release()  # anything still in the worker's cgroup dies now
        if self.staging is not None:  # the worker is gone: nothing writes the staging any more
            if self._commit_cache:
                self.cache_committed = self.staging.commit()
            self.staging.discard()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def run_job(job: dict, limits: SandboxLimits, on_event=None, role: str = "trainer") -> WorkerResult:
    """One-shot: spawn a worker, run `job`, kill it."""
    worker = WorkerProcess(limits, role=role)
    try:
        return worker.run(job, limits.timeout_s, on_event)
    finally:
        worker.kill()


def limits_dict(limits: SandboxLimits) -> dict:
    data = asdict(limits)
    data["cpu_s"] = limits.cpu_limit()
    return data
