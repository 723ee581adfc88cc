"""The registry of discoverable components. Each task lives in its own sub-package."""

from __future__ import annotations

from metarl.errors import USAGE, MetarlError
from metarl.tasks.base import SeedProgram, Task
from metarl.tasks.drift import TASK as drift
from metarl.tasks.optimizer import TASK as optimizer


class UnknownTask(MetarlError, KeyError):
    """A task name that is not in the registry (the message lists the known ones)."""

    exit_code = USAGE


def _registry() -> dict[str, Task]:

    return {task.name: task for task in (drift, optimizer)}


def task_names() -> list[str]:
    return list(_registry())


def get_task(name: str) -> Task:
    tasks = _registry()
    if name not in tasks:
        raise UnknownTask(f"unknown task {name!r}; choose one of: {', '.join(tasks)}")
    return tasks[name]


__all__ = ["SeedProgram", "Task", "UnknownTask", "get_task", "task_names"]
