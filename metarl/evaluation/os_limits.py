"""The OS limits of a sandboxed worker that are not mounts: processes and threads, memory
outside any mount, and the process tree's accounting.

Why (measured by an attacker on the 2-core CPU before this module): a candidate started
thousands of threads (there was no limit on processes or threads), and memory that no mount
bounds was open to it.

Processes and threads: at most `process_limit()` = 256 + 4 per core (264 on the 2-core VM; a
trainer needs 26 and a tracer 22 there, measured by polling the worker's tree while it
evaluates the PPO-clip seed), threads included. RLIMIT_NPROC (set by the worker) is not
enforced for the host's root: bubblewrap maps the sandbox's uid to the caller's, uid 0, which
the kernel exempts (measured: a root-run sandbox started 2000 threads under RLIMIT_NPROC = 50,
the same sandbox run by uid 65534 stopped at 48; each sandbox counts only its own, since the
count is per user namespace). So when this process is root each worker is started inside its
own pids cgroup (cgroup v1 `pids`, or v2 where `pids` is enabled at the root) whose
`pids.max` is the limit: the shell that execs bwrap enters it first, so nothing of the worker
is ever outside it, and whatever is left in it when the worker is killed is killed too.
Without either (root, no writable pids cgroup) the parent's watchdog counts the tree's
threads every `memory_poll_s` and kills it above the limit (after the fact; logged).

Memory outside any mount: an unmapped memfd or SysV shared-memory segment is invisible to the
memory watchdog (not resident in any process), so tracers, which run candidate Python, get a
seccomp filter refusing `memfd_create`, `memfd_secret` and `shmget` (and every syscall of a
foreign ABI), and every worker has RLIMIT_MSGQUEUE = 0 (worker.py).
"""

from __future__ import annotations

import itertools
import logging
import os
import platform as host
import signal
import struct
import threading
from pathlib import Path

import psutil

logger = logging.getLogger(__name__)


# --- the process limit --------------------------------------------------------------------------
def process_limit(cpus: int | None = None) -> int:
    """The most processes and threads one worker may hold: 256 + 4 per core.

    Args:
        cpus: cores of the machine (default: this one's). XLA's CPU thread pools grow with it.

    Returns:
        The limit (264 on 2 cores, where a trainer needs 26).
    """
    return 256 + 4 * int(cpus or os.cpu_count() or 1)


def process_group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process of group `pgid` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies answer kill(0) until reaped: only count live members
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and its descendants in MiB; 0 once the process is gone."""
    try:
        root = psutil.Process(pid)
        total = root.memory_info().rss
        for child in root.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20
    except psutil.Error:  # the worker exited between the poll and the read
        return 0.0


def tree_tasks(pid: int) -> int:
    """Threads of `pid` and its descendants (processes count with their threads); 0 once gone."""
    try:
        root = psutil.Process(pid)
        total = root.num_threads()
        for child in root.children(recursive=True):
            try:
                total += child.num_threads()
            except psutil.Error:
                pass
        return total
    except psutil.Error:
        return 0


def seccomp_pipe() -> int | None:
    """A readable fd holding the tracer's seccomp program (`seccomp_filter`), or None on an
    architecture it does not know."""
    program = seccomp_filter()
    if program is None:
        logger.warning("no seccomp filter for this architecture: memfd and SysV shm stay open")
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # 8 bytes per instruction: far below a pipe's buffer
    finally:
        os.close(write_end)
    return read_end


# --- seccomp ------------------------------------------------------------------------------------
# syscall numbers refused to a tracer: memfd_create, memfd_secret, shmget (per architecture)
_REFUSED_SYSCALLS = {
    "x86_64": (0xC000003E, (319, 447, 29)),  # AUDIT_ARCH_X86_64
    "aarch64": (0xC00000B7, (279, 447, 194)),  # AUDIT_ARCH_AARCH64
}
_X32_BIT = 0x40000000


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """A classic-BPF seccomp program refusing (EPERM) the memory that no mount or watchdog
    bounds: memfd_create, memfd_secret, shmget; and every syscall of a foreign ABI (x32,
    32-bit compat: ENOSYS), whose numbers differ. None on an architecture it does not know.

    Args:
        machine: `platform.machine()` (default: this one's).

    Returns:
        The `struct sock_filter` array, as bubblewrap's `--seccomp FD` reads it.
    """
    known = _REFUSED_SYSCALLS.get(machine or host.machine())
    if known is None:
        return None
    arch, numbers = known
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, JGE|K, RET|K
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    # [0] ld arch, [1] jeq arch, [2] ld nr, [3] jge x32, [4..] jeq nr, allow, eperm, enosys;
    # a jump from instruction i to t is the offset t - (i + 1)
    eperm_at = 4 + len(numbers) + 1
    enosys_at = eperm_at + 1
    program = [
        (load, 0, 0, 4),  # seccomp_data.arch
        (jeq, 0, enosys_at - 2, arch),
        (load, 0, 0, 0),  # seccomp_data.nr
        (jge, enosys_at - 4, 0, _X32_BIT),
    ]
    for index, number in enumerate(numbers):
        program.append((jeq, eperm_at - (4 + index + 1), 0, number))
    program += [(ret, 0, 0, allow), (ret, 0, 0, eperm), (ret, 0, 0, enosys)]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


# --- the process limit for root: a pids cgroup per worker ---------------------------------------
_CGROUPS = Path("/sys/fs/cgroup")
_GROUP = "metarl-sandbox"
_counter = itertools.count()
_base_lock = threading.Lock()
_base: dict[str, Path | None] = {}


def _pids_hierarchy(proc_cgroup: str, cgroups: Path = _CGROUPS) -> Path | None:
    """Where pids cgroups can be made: this process's cgroup in a v1 `pids` hierarchy, or the
    v2 root when `pids` is enabled for its children; None when neither exists."""
    lines = proc_cgroup.splitlines()
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and "pids" in parts[1].split(","):
            base = cgroups / "pids" / parts[2].lstrip("/")
            if base.is_dir():
                return base
    if any(line.startswith("0::") for line in lines):
        try:
            if "pids" in (cgroups / "cgroup.subtree_control").read_text().split():
                return cgroups
        except OSError:
            return None
    return None


def _sweep_stale(group: Path) -> None:
    """Remove the empty cgroups of metarl processes that are gone (a crashed parent's)."""
    for child in group.glob("*-*"):
        owner = child.name.split("-", 1)[0]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            try:
                child.rmdir()
            except OSError as error:  # not empty, or raced: left for the next sweep
                logger.debug("stale sandbox cgroup %s kept: %s", child, error)


def _group_dir() -> Path | None:
    """This machine's `metarl-sandbox` pids cgroup, made once; None where none can be made."""
    with _base_lock:
        if "group" in _base:
            return _base["group"]
        group = None
        try:
            hierarchy = _pids_hierarchy(Path("/proc/self/cgroup").read_text())
            if hierarchy is not None:
                group = hierarchy / _GROUP
                group.mkdir(exist_ok=True)
                if hierarchy == _CGROUPS:  # v2: its children need the controller too
                    controllers = (group / "cgroup.subtree_control").read_text().split()
                    if "pids" not in controllers:
                        (group / "cgroup.subtree_control").write_text("+pids")
                _sweep_stale(group)
        except OSError as error:
            logger.warning("no pids cgroup can be made here (%s)", error)
            group = None
        _base["group"] = group
        return group


class ProcessLimit:
    """How one worker's processes and threads are capped; `prefix` starts it under the cap.

    Attributes:
        limit: the most tasks (processes and threads) the worker may hold.
        mechanism: "RLIMIT_NPROC" (not root: the kernel enforces the worker's own rlimit),
            "pids cgroup" (root: a cgroup of its own) or "watchdog" (root without a pids
            cgroup: the parent counts and kills, after the fact).
    """

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.cgroup: Path | None = None
        if os.geteuid() != 0:
            self.mechanism = "RLIMIT_NPROC"
            return
        group = _group_dir()
        if group is not None:
            try:
                cgroup = group / f"{os.getpid()}-{next(_counter)}"
                cgroup.mkdir()
                (cgroup / "pids.max").write_text(str(self.limit))
                self.cgroup = cgroup
            except OSError as error:
                logger.warning("cannot make a pids cgroup under %s: %s", group, error)
        self.mechanism = "pids cgroup" if self.cgroup is not None else "watchdog"
        if self.cgroup is None:
            logger.warning(
                "running as root without a pids cgroup: the sandbox's process limit (%d) is "
                "enforced only by the parent's watchdog",
                self.limit,
            )

    def prefix(self) -> list[str]:
        """What to start the worker's command with: a shell that enters the cgroup first."""
        if self.cgroup is None:
            return []
        # `unset PWD`: the shell's own variable would otherwise reach bwrap's environment
        script = 'echo $$ > "$0" && unset PWD && exec "$@"'
        return ["/bin/sh", "-c", script, str(self.cgroup / "cgroup.procs")]

    def release(self) -> None:
        """Kill whatever is left in the cgroup, then remove it (the worker was killed already)."""
        if self.cgroup is None:
            return
        cgroup, self.cgroup = self.cgroup, None
        for _ in range(50):
            try:
                pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                cgroup.rmdir()
                return
            except OSError:
                threading.Event().wait(0.02)
        logger.warning("could not remove the sandbox cgroup %s", cgroup)
