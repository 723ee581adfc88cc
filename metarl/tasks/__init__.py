"""The registry of discoverable components. Each task lives in its own sub-package.

The registry names each task and the sub-package whose `TASK` defines it. A task's package
(and with it jax) is imported only when `get_task` asks for it, so listing the names is cheap:
`metarl --help` and the commands' option help read them without importing jax.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from metarl.errors import USAGE, MetarlError

if TYPE_CHECKING:
    from metarl.tasks.base import SeedProgram, Task

# task name -> the sub-package whose TASK it is, in the order the names are listed
_PACKAGES = {
    "drift": "metarl.tasks.drift",
    "optimizer": "metarl.tasks.optimizer",
}


class UnknownTask(MetarlError, KeyError):
    """A task name that is not in the registry (the message lists the known ones)."""

    exit_code = USAGE


def task_names() -> list[str]:
    return list(_PACKAGES)


def get_task(name: str) -> Task:
    if name not in _PACKAGES:
        raise UnknownTask(f"unknown task {name!r}; choose one of: {', '.join(_PACKAGES)}")
    return importlib.import_module(_PACKAGES[name]).TASK


def __getattr__(name: str):
    """`Task` and `SeedProgram`, from `metarl.tasks.base` (which imports jax) on first use."""
    if name in ("SeedProgram", "Task"):
        # lazy: base imports jax; the registry's names are read without it (`metarl --help`)
        from metarl.tasks import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SeedProgram", "Task", "UnknownTask", "get_task", "task_names"]
