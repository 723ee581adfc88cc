"""Names of meta-RL "environments": `Meta-<method>/<family>/<role>`.

A meta-RL suite's role is not a list of gymnax environments but one meta-training run on a
task family, scored by adaptation on that role's held-out tasks (loop.py). Naming that
unit like an environment (`Meta-rl2/bandit-tasks/validation`) lets it travel wherever an env
name does — suites, configs, the cascade, baseline cache keys, the archive — while the trainer
dispatches on the prefix (trainers.make_trainer). This module is names only (no JAX), so configs
and suites can read them.
"""

from __future__ import annotations

from typing import NamedTuple

from metarl.errors import USAGE, MetarlError

META_PREFIX = "Meta-"
METHODS = ("rl2", "maml")
# the Components slots (components.py) each meta-learner uses: RL²'s outer loop is PPO (its loss
# and optimizer), MAML's inner rule is the optimizer. Declared here, without JAX, so the tasks
# layer can say which meta-learners score a task (rl2.SLOTS and maml.SLOTS are these; a test
# poisons each slot of each trainer to check the claims).
METHOD_SLOTS = {"rl2": ("drift", "value_loss", "make_optimizer"), "maml": ("make_optimizer",)}
ROLES = ("train", "validation", "test")


class UnknownMetaEnv(MetarlError, ValueError):
    """A malformed meta-RL environment name."""

    exit_code = USAGE


class MetaEnv(NamedTuple):
    method: str  # "rl2" or "maml"
    family: str  # a task family of tasks.py, e.g. "bandit-tasks"
    role: str  # which held-out tasks adaptation is scored on

    @property
    def name(self) -> str:
        return f"{META_PREFIX}{self.method}/{self.family}/{self.role}"


def is_meta(name: str) -> bool:
    return name.startswith(META_PREFIX)


def parse_meta(name: str) -> MetaEnv:
    """`Meta-rl2/bandit-tasks/validation` -> MetaEnv("rl2", "bandit-tasks", "validation").

    Raises:
        UnknownMetaEnv: not three parts, an unknown method or role.
    """
    parts = name[len(META_PREFIX) :].split("/") if is_meta(name) else []
    if len(parts) != 3 or parts[0] not in METHODS or parts[2] not in ROLES:
        raise UnknownMetaEnv(
            f"malformed meta-RL environment {name!r}: write "
            f"{META_PREFIX}<{'|'.join(METHODS)}>/<family>/<{'|'.join(ROLES)}>"
        )
    return MetaEnv(*parts)
