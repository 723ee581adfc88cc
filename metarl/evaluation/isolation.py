"""What a sandboxed worker sees: bubblewrap's mounts, devices and environment, built as a
pure argv (`bubblewrap_argv`), and how a worker is launched (`launch`).

Why (measured by an attacker on the 2-core CPU before this module): only `/tmp` was capped, so a
tracer wrote 3 GB into the other writable tmpfs mounts (bwrap's root, its `/dev` and
`/dev/shm`) under a 3000 MB memory limit, and every worker, tracers included, had every
`/dev/nvidia*` node.

What a worker can write (tests/test_os_limits.py walks `/proc/self/mountinfo` from inside and
writes into every read-write mount until it is stopped):
- `/tmp` (also its cwd, HOME and TMPDIR): a tmpfs of `tmpfs_mb - tmpfs_mb // 8`;
- `/dev/shm` (POSIX shared memory): a tmpfs of `tmpfs_mb // 8` (none below 8 MB: read-only);
- nothing else: bwrap's root tmpfs and its `/dev` tmpfs are remounted read-only once their
  mount points exist; the remaining read-write mounts are `/proc` and device nodes that store
  nothing (`null`, `zero`, `full`, `random`, `urandom`, `tty`, devpts, a trainer's GPU).
  Memory that is neither a mount nor counted in a process's resident size is closed by
  os_limits.py (a seccomp filter against memfd and SysV shared memory in tracers,
  RLIMIT_MSGQUEUE = 0). So a tracer writes at most `tmpfs_mb` (64 MB by default) in total,
  all gone with it.
- A trainer also writes the compilation cache's staging directory (evaluation/xla_cache.py):
  host disk, but only trusted code runs there (the verified artifact can do no I/O), each file
  is capped by RLIMIT_FSIZE, and the parent commits at most `xla_cache.MAX_STAGED_MB`.

Devices: `/dev/nvidia*` only in trainers; a pinned trainer gets `/dev/nvidiaN` for its pinned
N plus the control nodes (`nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`) and
sees its GPU by UUID when the driver lists one (CUDA's own numbering of the one visible GPU
cannot then point elsewhere); an unpinned trainer gets every node; tracers (and the artifact
checker, a tracer-type worker) get none and run JAX on the CPU (`JAX_PLATFORMS=cpu`; they
still export for the trainer's platform).

The environment: bwrap itself starts with an empty one (its PID-1 helper's `/proc/1/environ`
is readable from inside); the worker gets an allow-list (locale, XLA/JAX/CUDA settings) without
anything named like a key, token, secret or password, HOME and TMPDIR on its tmpfs, and
XLA_PYTHON_CLIENT_PREALLOCATE=false (a spare initialising its backend on a GPU must not take
the memory of the worker that is training).
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from metarl.errors import MetarlError
from metarl.evaluation.os_limits import ProcessLimit, seccomp_pipe
from metarl.evaluation.settings import SandboxLimits

logger = logging.getLogger(__name__)

BWRAP = "bwrap"
SANDBOX_HOME = "/tmp"
SANDBOX_CACHE = "/metarl-xla-cache"  # where a trainer sees the compilation cache (read-only)
SANDBOX_STAGING = "/metarl-xla-staging"  # a trainer's private, writable cache directory
CACHE_ENVVAR = "METARL_XLA_CACHE"  # tells the worker (a trainer) which cache directory to use
SANDBOX_UID = 65534
NVIDIA_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
# The worker's environment: an allow-list (locale, XLA/JAX/CUDA settings) with anything named
# like a key, token, secret or password removed.
_SECRET_PATTERN = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
_ENV_ALLOW = re.compile(
    r"^(PATH|PYTHONPATH|LANG|LANGUAGE|LC_[A-Z]+|TZ|VIRTUAL_ENV|XLA_FLAGS|XLA_PYTHON_CLIENT_.*|"
    r"JAX_.*|TF_CPP_.*|CUDA_.*|NVIDIA_.*|LD_LIBRARY_PATH|OMP_NUM_THREADS)$"
)


class SandboxUnavailable(MetarlError, RuntimeError):
    """bubblewrap is missing or cannot create namespaces here, and no opt-out was given."""

    hint = "pass --unsafe-no-sandbox to run candidates without isolation (not on shared machines)"


def tmpfs_split(tmpfs_mb: int) -> tuple[int, int]:
    """How the writable budget is split: (MB of `/tmp`, MB of `/dev/shm`, 0 = read-only)."""
    shm = int(tmpfs_mb) // 8
    return int(tmpfs_mb) - shm, shm


# --- environment and process tree -------------------------------------------------------------
def scrubbed_environment(tmpdir: str) -> dict:
    """The worker's environment: the allow-list minus secret-looking names, HOME and TMPDIR
    at `tmpdir`, and the settings every worker starts with."""
    env = {
        k: v for k, v in os.environ.items() if _ENV_ALLOW.match(k) and not _SECRET_PATTERN.search(k)
    }
    env.update(
        HOME=tmpdir,
        TMPDIR=tmpdir,
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONNOUSERSITE="1",
        TF_CPP_MIN_LOG_LEVEL=env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        # a pre-warmed spare initialises the backend while another worker trains: on a GPU it
        # must not grab 75% of the device's memory up front (XLA's default)
        XLA_PYTHON_CLIENT_PREALLOCATE=env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
    )
    return env


# --- devices ------------------------------------------------------------------------------------
def nvidia_nodes() -> list[str]:
    """Every `/dev/nvidia*` path of this machine, sorted."""
    return sorted(glob.glob("/dev/nvidia*"))


def device_nodes(role: str, pinned: Sequence[int] | None, nodes: Sequence[str]) -> list[str]:
    """The `/dev/nvidia*` nodes a worker gets (a pure function of its arguments).

    Args:
        role: "trainer" gets devices; any other role (a tracer, the artifact checker) none.
        pinned: GPU minor numbers the trainer is pinned to; None: unpinned (every node).
        nodes: the machine's `/dev/nvidia*` paths.

    Returns:
        The nodes to bind, in the order given.
    """
    if role != "trainer":
        return []
    if pinned is None:
        return list(nodes)
    wanted = {f"/dev/nvidia{int(minor)}" for minor in pinned}
    control = {f"/dev/{name}" for name in NVIDIA_CONTROL_NODES}
    return [node for node in nodes if node in wanted or node in control]


def parse_gpu_information(text: str) -> tuple[int | None, str | None]:
    """(device minor, GPU UUID) from one `/proc/driver/nvidia/gpus/*/information` file."""
    minor = re.search(r"^Device Minor:\s*(\d+)\s*$", text, re.M)
    uuid = re.search(r"^GPU UUID:\s*(\S+)\s*$", text, re.M)
    return (int(minor.group(1)) if minor else None), (uuid.group(1) if uuid else None)


def nvidia_gpus(root: str = "/proc/driver/nvidia/gpus") -> dict[int, str | None]:
    """This machine's GPUs as the driver lists them: device minor -> UUID (None: not listed)."""
    gpus: dict[int, str | None] = {}
    for path in sorted(glob.glob(os.path.join(root, "*", "information"))):
        try:
            minor, uuid = parse_gpu_information(Path(path).read_text())
        except OSError as error:
            logger.warning("cannot read %s: %s", path, error)
            continue
        if minor is not None:
            gpus[minor] = uuid
    return gpus


def resolve_pin(device: str, gpus: dict[int, str | None]) -> tuple[int | None, str]:
    """The device minor to bind for a pinned trainer, and its CUDA_VISIBLE_DEVICES inside.

    Args:
        device: the pin, as `CUDA_VISIBLE_DEVICES` names it: an index N (taken to be
            `/dev/nvidiaN`, as platform.visible_gpus enumerates them) or a GPU UUID.
        gpus: device minor -> UUID (`nvidia_gpus()`).

    Returns:
        (minor, visible): minor None when the pin names no known GPU (a MIG instance, a UUID
        the driver does not list): then every node is bound, and `visible` is the pin as given.
    """
    device = device.strip()
    if device.isdigit():
        minor = int(device)
        return minor, gpus.get(minor) or device
    for minor, uuid in gpus.items():
        if uuid and uuid == device:
            return minor, uuid
    return None, device


# --- the bwrap argv -----------------------------------------------------------------------------
def _package_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


def read_only_paths() -> list[str]:
    """What a worker needs to run Python: system libraries, the interpreter, the venv, metarl."""
    paths = ["/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache", "/etc/alternatives"]
    for prefix in {sys.base_prefix, sys.prefix, sys.exec_prefix}:
        paths.append(str(Path(prefix).resolve()))
        paths.append(prefix)
    executable = Path(sys.executable)
    paths += [str(executable.parent), str(executable.resolve().parent.parent)]
    paths.append(_package_root())
    seen, out = set(), []
    for path in paths:
        if path not in seen and os.path.exists(path):
            seen.add(path)
            out.append(path)
    return out


@dataclass(frozen=True)
class Mounts:
    """Everything `bubblewrap_argv` needs besides the worker's role and environment.

    Attributes:
        binary: the bwrap executable.
        read_only: host paths bound read-only at the same path.
        tmpfs_mb: the worker's whole writable budget (see `tmpfs_split`).
        nodes: the machine's `/dev/nvidia*` paths.
        cache: a trainer's compilation cache (host directory, bound read-only), or None.
        staging: a trainer's private staging directory (host, bound writable), or None.
        seccomp_fd: an open fd holding `seccomp_filter()`, for roles that get it, or None.
    """

    binary: str
    read_only: tuple[str, ...]
    tmpfs_mb: int
    nodes: tuple[str, ...] = ()
    cache: str | None = None
    staging: str | None = None
    seccomp_fd: int | None = None


def bubblewrap_argv(
    mounts: Mounts, role: str, pinned: Sequence[int] | None, environment: dict[str, str]
) -> list[str]:
    """The `bwrap ... --` prefix that isolates one worker: a pure function of its arguments.

    Args:
        mounts: paths, budget, devices and cache of this machine (see Mounts).
        role: "trainer" may get the cache and devices; any other role gets neither.
        pinned: GPU minors a trainer is pinned to (None: unpinned; see `device_nodes`).
        environment: the worker's whole environment (bwrap itself starts with none).

    Returns:
        The argv, ending with "--".
    """
    tmp_mb, shm_mb = tmpfs_split(mounts.tmpfs_mb)
    command = [
        mounts.binary,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--hostname",
        "metarl-sandbox",
    ]
    # the tmpfs first: read-only binds that live under /tmp (a checkout in /tmp) go on top of it
    command += ["--size", str(max(1, tmp_mb) * 2**20), "--tmpfs", SANDBOX_HOME]
    for path in mounts.read_only:
        command += ["--ro-bind", path, path]
    if role == "trainer" and mounts.cache and mounts.staging:
        command += ["--ro-bind", mounts.cache, SANDBOX_CACHE]
        command += ["--bind", mounts.staging, SANDBOX_STAGING]
    command += ["--proc", "/proc", "--dev", "/dev"]
    for node in device_nodes(role, pinned, mounts.nodes):
        command += ["--dev-bind", node, node]
    command += ["--remount-ro", "/dev"]
    if shm_mb > 0:
        command += ["--size", str(shm_mb * 2**20), "--tmpfs", "/dev/shm"]
    command += ["--remount-ro", "/"]  # last: every mount point exists by now
    if role != "trainer" and mounts.seccomp_fd is not None:
        command += ["--seccomp", str(mounts.seccomp_fd)]
    command += ["--chdir", SANDBOX_HOME]
    for key, value in sorted(environment.items()):
        command += ["--setenv", key, value]
    return command + ["--"]


def bwrap_binary() -> str:
    """The bwrap executable.

    Raises:
        SandboxUnavailable: bubblewrap is not installed.
    """
    binary = shutil.which(BWRAP)
    if binary is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed: candidate code runs only inside it",
            hint="install it (Debian/Ubuntu: apt-get install bubblewrap), or pass "
            "--unsafe-no-sandbox to run candidates without isolation",
        )
    return binary


def bubblewrap_command(environment: dict, tmpfs_mb: int) -> list[str]:
    """The prefix of a bare sandbox (a tracer's mounts, no seccomp): for `check_bubblewrap`."""
    mounts = Mounts(bwrap_binary(), tuple(read_only_paths()), int(tmpfs_mb))
    return bubblewrap_argv(mounts, "tracer", None, environment)


_BWRAP_WORKS: dict[str, SandboxUnavailable | None] = {}


def check_bubblewrap() -> None:
    """Raise SandboxUnavailable unless bwrap can start a process here (checked once)."""
    if "result" not in _BWRAP_WORKS:
        try:
            command = bubblewrap_command({"PATH": "/usr/bin:/bin"}, 1) + [
                sys.executable,
                "-c",
                "pass",
            ]
            done = subprocess.run(command, env={}, capture_output=True, timeout=60)
            _BWRAP_WORKS["result"] = (
                None
                if done.returncode == 0
                else SandboxUnavailable(
                    "bubblewrap (bwrap) cannot create its namespaces here: "
                    + done.stderr.decode("utf-8", "replace").strip()[-300:]
                )
            )
        except SandboxUnavailable as error:
            _BWRAP_WORKS["result"] = error
        except (OSError, subprocess.TimeoutExpired) as error:
            _BWRAP_WORKS["result"] = SandboxUnavailable(
                f"bubblewrap (bwrap) failed to start: {error}"
            )
    found = _BWRAP_WORKS["result"]
    if found is not None:
        raise SandboxUnavailable(found.message, hint=found.hint)


# --- launching a worker -------------------------------------------------------------------------
@dataclass
class Launch:
    """How to start one worker.

    Attributes:
        command: the whole argv (a cgroup-entering shell, bwrap, then the worker's own).
        environment: what the first process starts with (bwrap: nothing).
        filter_fd: the seccomp program's fd, to pass to the process and then close; or None.
        isolation: "bubblewrap" or "none (unsafe_no_sandbox)".
        cache_inside: where the worker sees the shared compilation cache (staging links point
            there), or None without a cache.
    """

    command: list[str]
    environment: dict[str, str]
    filter_fd: int | None
    isolation: str
    cache_inside: str | None


def launch(
    worker: list[str],
    limits: SandboxLimits,
    role: str,
    device: str | None,
    tmpdir: str,
    staging: str | None,
    processes: ProcessLimit,
) -> Launch:
    """How to start a worker of `role` (see the module docstring for what it gets).

    Args:
        worker: the worker's own argv (`python -m metarl.evaluation.worker ...`).
        limits: the worker's limits (tmpfs budget, cache, the unsafe opt-out).
        role: "tracer" (also the artifact checker) or "trainer".
        device: the pinned accelerator (CUDA_VISIBLE_DEVICES value), or None.
        tmpdir: the parent's private directory for this worker (HOME without bubblewrap).
        staging: a trainer's compilation-cache staging directory on the host, or None.
        processes: the worker's process limit.

    Returns:
        The Launch.

    Raises:
        SandboxUnavailable: bubblewrap is not installed (and the sandbox was not opted out of).
    """
    cache = limits.compilation_cache if staging else None
    if limits.unsafe_no_sandbox:
        environment = scrubbed_environment(tmpdir)
        if staging:
            environment[CACHE_ENVVAR] = staging
        if device is not None:
            environment["CUDA_VISIBLE_DEVICES"] = device
        if role != "trainer":
            environment["JAX_PLATFORMS"] = "cpu"
        # no --nproc: outside its own user namespace RLIMIT_NPROC would count every process
        # of this user
        command = processes.prefix() + worker
        return Launch(command, environment, None, "none (unsafe_no_sandbox)", cache)
    binary = bwrap_binary()
    inside = scrubbed_environment(SANDBOX_HOME)
    if staging:
        inside[CACHE_ENVVAR] = SANDBOX_STAGING
    pinned = None
    if device is not None:
        inside["CUDA_VISIBLE_DEVICES"] = device
    if role == "trainer" and device is not None:
        minor, inside["CUDA_VISIBLE_DEVICES"] = resolve_pin(device, nvidia_gpus())
        pinned = None if minor is None else [minor]
        if minor is None and nvidia_nodes():
            logger.warning("device %r names no GPU node: every GPU node is bound", device)
    filter_fd = None
    if role != "trainer":  # no device nodes: JAX on the CPU (it exports for any platform)
        inside["JAX_PLATFORMS"] = "cpu"
        filter_fd = seccomp_pipe()
    mounts = Mounts(
        binary=binary,
        read_only=tuple(read_only_paths()),
        tmpfs_mb=int(limits.tmpfs_mb),
        nodes=tuple(nvidia_nodes()),
        cache=cache,
        staging=staging,
        seccomp_fd=filter_fd,
    )
    # RLIMIT_NPROC counts per uid and user namespace: in its own, only this sandbox's tasks
    argv = worker + ["--nproc", str(processes.limit), "--sandboxed"]
    command = processes.prefix() + bubblewrap_argv(mounts, role, pinned, inside) + argv
    return Launch(command, {}, filter_fd, "bubblewrap", SANDBOX_CACHE if cache else None)
