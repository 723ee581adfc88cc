"""Facts about this machine and its libraries, read without importing JAX or touching a device.

The parent process records them with every run and keys the baseline cache on them; the worker
needs one of them (whether a CUDA plugin is installed) before it may import anything heavy.
Everything here reads package metadata, the environment and /proc only.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import re

import metarl

PACKAGES = ("jax", "jaxlib", "gymnax", "flax", "optax")
_CUDA_MODULES = (
    "jax_cuda12_plugin",
    "jax_cuda13_plugin",
    "jax_plugins.xla_cuda12",
    "jax_plugins.xla_cuda13",
)
_ACCELERATOR_PACKAGES = ("jax-cuda12-plugin", "jax-cuda13-plugin", "libtpu")


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
    """metarl's version and those of the libraries that change a run's numbers (None: absent)."""
    versions: dict[str, str | None] = {"metarl": metarl.__version__}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def device_description() -> str:
    """Where evaluations run, e.g. "cpu: AMD EPYC 7B13 x2" or "jax-cuda12-plugin; host ..."."""
    accelerator = None
    for package in _ACCELERATOR_PACKAGES:
        try:
            importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
        accelerator = package
        break
    cpu = "cpu"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass  # not Linux: the generic name stays
    where = f"{cpu} x{os.cpu_count() or 0}"
    if accelerator and os.environ.get("JAX_PLATFORMS", "") != "cpu":
        return f"{accelerator}; host {where}"
    return f"cpu: {where}"
