"""Facts about this machine and its libraries, read without importing JAX or touching a device,
and the one key every evaluation is filed under.

The parent process records them with every run; the worker needs one of them (whether a CUDA
plugin is installed) before it may import anything heavy. Everything here reads package
metadata, the environment and /proc only (`evaluation_identity()` takes ~5 ms on a CPU host).

**One evaluation identity.** `evaluation_identity()` is the single answer to "what, besides the
program, the task and the cascade settings, changes a score": the versions of metarl and of the
libraries that compute the numbers, the backend, XLA_FLAGS (metarl's own CPU flags change the
last bits of the returns: metarl/__init__.py), and the processor (CPU model and count on a CPU
backend: vectorisation and Eigen's threading change summation order; GPU models, driver and
CUDA libraries on a GPU backend). `evaluation_key()` is the single key builder over it: the
archive's evaluation keys (archives/keys.py) and the baseline cache's keys
(evaluation/baseline_cache.py) are both its digests. Before, discovery keyed its rows on the
library versions alone and ES, distillation, GRPO and derived rows on versions + backend + XLA
flags, so the same program evaluated the same way by two methods never shared a key: the cache
missed and the all-runs leaderboard listed it twice.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
from typing import Any, Mapping

import metarl

PACKAGES = ("jax", "jaxlib", "gymnax", "flax", "optax")
_CUDA_MODULES = (
    "jax_cuda12_plugin",
    "jax_cuda13_plugin",
    "jax_plugins.xla_cuda12",
    "jax_plugins.xla_cuda13",
)
_ACCELERATOR_PACKAGES = ("jax-cuda12-plugin", "jax-cuda13-plugin", "libtpu")
# what compiles and computes a CUDA backend's numbers besides jaxlib: the plugin and its PJRT
# runtime, ptxas/nvJitLink (PTX to machine code) and the math libraries XLA calls
_CUDA_LIBRARIES = (
    "jax-cuda12-plugin",
    "jax-cuda12-pjrt",
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "nvidia-cuda-nvcc-cu12",
    "nvidia-nvjitlink-cu12",
    "nvidia-cublas-cu12",
    "nvidia-cudnn-cu12",
    "nvidia-cufft-cu12",
    "nvidia-cusolver-cu12",
    "nvidia-cusparse-cu12",
)
_NVIDIA_PROC = "/proc/driver/nvidia"
# the fields of an evaluation identity, all of which enter every evaluation key
IDENTITY_FIELDS = ("metarl", *PACKAGES, "backend", "xla_flags", "device", "accelerator")


def cuda_plugin_installed() -> bool:
    """Whether a JAX CUDA plugin is importable (found by its spec; nothing is imported)."""
    for name in _CUDA_MODULES:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def backend() -> str:
    """The platform the trainer compiles for: "cuda" when a CUDA plugin is installed."""
    if os.environ.get("JAX_PLATFORMS", "") == "cpu":
        return "cpu"
    return "cuda" if cuda_plugin_installed() else "cpu"


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES values: the variable's own
    entries when it is set, else one per /dev/nvidiaN; [] without a CUDA plugin (on a CPU
    backend nothing is pinned)."""
    if backend() != "cuda":
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    numbers = [re.fullmatch(r"/dev/nvidia(\d+)", path) for path in glob.glob("/dev/nvidia*")]
    return [m.group(1) for m in sorted(filter(None, numbers), key=lambda m: int(m.group(1)))]


def library_versions() -> dict[str, str | None]:
    """metarl's version and those of the libraries that change a run's numbers (None: absent).
    Part of `evaluation_identity()`, which is what keys an evaluation; never key on this alone."""
    versions: dict[str, str | None] = {"metarl": metarl.__version__}
    for package in PACKAGES:
        versions[package] = _installed(package)
    return versions


def _installed(package: str) -> str | None:
    """The installed version of `package`, or None when it is absent."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("cpu" where there is none)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: the generic name stays
    return "cpu"


def gpu_models(proc: str = _NVIDIA_PROC) -> list[str]:
    """The models of this host's NVIDIA GPUs, sorted, one entry per distinct model, from the
    driver's /proc files (nothing is opened on a device).

    Args:
        proc: the NVIDIA driver's /proc directory (a parameter for tests).

    Returns:
        e.g. ["NVIDIA H100 80GB HBM3"]; [] when the driver exposes none.
    """
    models = set()
    for path in glob.glob(os.path.join(proc, "gpus", "*", "information")):
        try:
            with open(path) as handle:
                for line in handle:
                    if line.startswith("Model:"):
                        models.add(line.split(":", 1)[1].strip())
        except OSError:
            continue  # a GPU that vanished while we read: the others still name the host
    return sorted(models)


def gpu_driver(proc: str = _NVIDIA_PROC) -> str | None:
    """The NVIDIA kernel driver's version from `{proc}/version`, or None without one."""
    try:
        with open(os.path.join(proc, "version")) as handle:
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]*)", handle.read())
    except OSError:
        return None
    return found.group(1) if found else None


def compute_device(proc: str = _NVIDIA_PROC) -> str:
    """The processor an evaluation's numbers are computed on, as far as it changes them.

    CPU backend: the CPU model and count (the model decides the vector instructions XLA emits;
    the count the threads Eigen splits a contraction over). CUDA backend: the GPU models and the
    driver (several models on one host read as their sorted list, so a mixed host never shares
    a key with a uniform one); the host CPU does not compute the returns there.

    Args:
        proc: the NVIDIA driver's /proc directory (a parameter for tests).

    Returns:
        e.g. "cpu: AMD EPYC 7B13 x2" or "cuda: NVIDIA H100 80GB HBM3; driver 550.54.15".
    """
    if backend() != "cuda":
        return f"cpu: {_cpu_model()} x{os.cpu_count() or 0}"
    models = ", ".join(gpu_models(proc)) or "GPU model unknown"
    return f"cuda: {models}; driver {gpu_driver(proc) or 'unknown'}"


def evaluation_identity() -> dict[str, str | None]:
    """Everything besides the program, the task and the cascade settings that changes an
    evaluation's numbers: the one identity every method's evaluation keys and the baseline
    cache's keys are built on (see the module docstring).

    Returns:
        {field: value} for every IDENTITY_FIELDS entry: metarl's and the numeric libraries'
        versions (None: absent), "backend" ("cpu" or "cuda"), "xla_flags" (XLA_FLAGS as set),
        "device" (`compute_device()`) and "accelerator" (the CUDA libraries' versions, "name
        version" joined by ", ", None on a CPU backend).
    """
    kind = backend()
    accelerator = None
    if kind == "cuda":
        found = [(name, _installed(name)) for name in _CUDA_LIBRARIES]
        accelerator = ", ".join(f"{name} {version}" for name, version in found if version)
    return {
        **library_versions(),
        "backend": kind,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "device": compute_device(),
        "accelerator": accelerator,
    }


def evaluation_key(payload: Mapping[str, Any], identity: Mapping[str, Any], length: int) -> str:
    """The one key builder for evaluations: a digest of what was evaluated and how (`payload`)
    and of where (`identity`). The archive's evaluation keys and the baseline cache's keys are
    both built here, so a program evaluated the same way by any method gets the same key.

    Args:
        payload: what was evaluated and how (task, settings; or the baseline's config and seed).
            JSON-ready; values that are not are written with str().
        identity: an `evaluation_identity()`: a run's, as recorded in its rows' `versions`, or
            this process's. Only IDENTITY_FIELDS enter the key (a recorded identity may carry
            more).
        length: hex digits kept.

    Returns:
        The key: `length` hex digits.

    Raises:
        ValueError: `identity` lacks an IDENTITY_FIELDS entry (say, bare library versions: a
            key that would silently differ from every other method's).
    """
    missing = [field for field in IDENTITY_FIELDS if field not in identity]
    if missing:
        raise ValueError(
            f"not an evaluation identity (missing {', '.join(missing)}): "
            "build it with metarl.platform.evaluation_identity()"
        )
    blob = json.dumps(
        {"payload": dict(payload), "identity": {f: identity[f] for f in IDENTITY_FIELDS}},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def device_description() -> str:
    """Where evaluations run, e.g. "cpu: AMD EPYC 7B13 x2" or "jax-cuda12-plugin; host ..."
    (for people; the evaluation key uses `compute_device()`)."""
    accelerator = next((p for p in _ACCELERATOR_PACKAGES if _installed(p) is not None), None)
    where = f"{_cpu_model()} x{os.cpu_count() or 0}"
    if accelerator and os.environ.get("JAX_PLATFORMS", "") != "cpu":
        return f"{accelerator}; host {where}"
    return f"cpu: {where}"
