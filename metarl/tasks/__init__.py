"""The registry of discoverable components. Each task lives in its own sub-package.

The registry names each task and the sub-package whose `TASK` defines it. A task's package
(and with it jax) is imported only when `get_task` asks for it, so listing the names is cheap:
`metarl --help` and the commands' option help read them without importing jax.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from metarl.errors import USAGE, MetarlError
from metarl.rl.meta.names import METHOD_SLOTS

if TYPE_CHECKING:
    from metarl.tasks.base import SeedProgram, Task
    from metarl.tasks.network import NetworkTask

# task name -> the sub-package whose TASK it is, in the order the names are listed
_PACKAGES = {
    "drift": "metarl.tasks.drift",
    "optimizer": "metarl.tasks.optimizer",
    "value_loss": "metarl.tasks.value_loss",
}
# task name -> the sub-package of a task whose candidate is data (a network), not a program
_NETWORK_PACKAGES = {
    "lpg": "metarl.tasks.lpg",
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


def network_task_names() -> list[str]:
    """The tasks whose candidate is a network's weights (tasks/network.py), e.g. lpg."""
    return list(_NETWORK_PACKAGES)


def known_task_names() -> list[str]:
    """Every task a command or an archive may name: the program tasks, then the network ones."""
    return [*_PACKAGES, *_NETWORK_PACKAGES]


def is_network_task(name: str) -> bool:
    """Whether `name`'s candidate is data trained by metarl's code rather than a program."""
    return name in _NETWORK_PACKAGES


def get_network_task(name: str) -> NetworkTask:
    if name not in _NETWORK_PACKAGES:
        raise UnknownTask(f"{name!r} is no network task; those are: {', '.join(_NETWORK_PACKAGES)}")
    return importlib.import_module(_NETWORK_PACKAGES[name]).TASK


def check_known(name: str) -> None:
    """UnknownTask (one line listing every task) unless `name` is a program or network task."""
    if name not in _PACKAGES and name not in _NETWORK_PACKAGES:
        raise UnknownTask(f"unknown task {name!r}; choose one of: {', '.join(known_task_names())}")


def reference_names(name: str) -> tuple[str, str]:
    """What `name`'s scores are normalised against: (in prose, in a table's column).

    A program task's reference is its baseline seed program; a network task declares its own
    (LPG's is the actor-critic).
    """
    if name in _NETWORK_PACKAGES:
        task = get_network_task(name)
        return task.reference, task.reference_short
    return "baseline seed", "baseline"


def distillable_tasks() -> list[str]:
    """The tasks whose candidates distillation and symbolic regression can sample."""
    return [name for name in _PACKAGES if get_task(name).distillable]


def meta_task_problem(task: str, suite: str) -> str | None:
    """Why `task` cannot be scored on `suite`, or None when it can.

    A meta-RL suite (`<family>@<method>`) trains the components its learner reads
    (rl/meta/names.py's METHOD_SLOTS): a task is scored there when its slot is one of them.
    MAML's inner loop, for one, is a policy-gradient step on fresh rollouts (ratio 1), where a
    drift is zero by its contract; its inner rule is the optimizer. Only registered tasks fill
    a slot (an LPG network is scored on grid and classic suites).
    """
    # lazy: suites reads distributions and configs, which `metarl --help` does not need
    from metarl.rl.suites import META_SEPARATOR, is_meta_suite

    if not is_meta_suite(suite):
        return None
    method = suite.partition(META_SEPARATOR)[2]
    if task not in _PACKAGES:
        return f"{task!r} fills no trainer slot, so a meta-RL suite cannot score it ({suite})"
    slot = get_task(task).slot
    if slot in METHOD_SLOTS[method]:
        return None
    fitting = [name for name in _PACKAGES if get_task(name).slot in METHOD_SLOTS[method]]
    others = [m for m, slots in METHOD_SLOTS.items() if slot in slots]
    ways = [f"--task {name}" for name in fitting] + [f"--meta {m} for a {task}" for m in others]
    return (
        f"--meta {method} trains only {', '.join(METHOD_SLOTS[method])}; a {task} candidate "
        f"fills {slot}, which it never reads: use {' or '.join(ways)}"
    )


def __getattr__(name: str):
    """`Task` and `SeedProgram`, from `metarl.tasks.base` (which imports jax) on first use."""
    if name in ("SeedProgram", "Task"):
        # lazy: base imports jax; the registry's names are read without it (`metarl --help`)
        from metarl.tasks import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SeedProgram",
    "Task",
    "UnknownTask",
    "check_known",
    "distillable_tasks",
    "get_network_task",
    "get_task",
    "is_network_task",
    "known_task_names",
    "meta_task_problem",
    "network_task_names",
    "reference_names",
    "task_names",
]
