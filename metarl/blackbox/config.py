"""The options of a black-box ES run and their defaults (the one settings source for `metarl es`).

The ES hyperparameters are the paper's (Goldie et al., RLC 2025, black-box LPO): population 64,
sigma 0.03 and learning rate 0.03, each decaying x0.99 per generation down to 0.01 and 0.001,
Adam with beta1 0.99, the mean initialised at zero (PPO-clip), antithetic sampling, centered
ranks, common random numbers within a generation and new training seeds each generation.

The budgets are not the paper's: on the 2-core CPU one member's training at 1e5 steps on
CartPole + Acrobot costs about a second when vmapped with the rest of a population, so a
generation of 64 members x 2 seeds is ~4-5 minutes there. `--population 16 --generations 10`
is a CPU-sized run; the paper's scale (1e7 steps, MinAtar) is for a GPU.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from metarl.blackbox.families import FAMILIES
from metarl.errors import USAGE, MetarlError
from metarl.evaluation.seeds import SeedError, parse_seed_values
from metarl.evaluation.settings import CascadeSettings, SandboxLimits
from metarl.rl.suites import UnknownSuite, get_suite


class ESConfigError(MetarlError, ValueError):
    """A bad option; the message is one line for the user."""

    exit_code = USAGE


# options a resume may change
BUDGETS = ("generations", "max_time", "timeout", "memory_mb", "unsafe_no_sandbox")


@dataclass
class ESConfig:
    task: str = "drift"
    suite: str = "classic"
    # the ES (paper defaults)
    population: int = 64  # members per generation (even: antithetic pairs)
    generations: int = 20
    hidden: int | None = None  # the meta-network's width; None: the task's (LPO 128, OPEN-lite 16)
    sigma: float = 0.03
    sigma_decay: float = 0.99
    sigma_floor: float = 0.01
    lr: float = 0.03
    lr_decay: float = 0.99
    lr_floor: float = 0.001
    beta1: float = 0.99
    member_seeds: int = 2  # training runs per member per generation (fresh each generation)
    rng_seed: int = 0  # seeds the search: sampling, training keys
    # the members' training and the exports' evaluation
    timesteps: int | None = 100_000  # per-environment budget; None/0: the suite's own
    export_every: int = 5  # the ES mean becomes a candidate every this many generations
    train_seeds: int = 2  # training seeds of each export's cascade evaluation (as discover)
    # pinned training seed values of the exports' evaluations (`--seed-values`); None: drawn
    seed_values: list[int] | None = None
    heldout: bool = True  # score the exports' held-out environments (never used by the ES)
    max_time: float | None = None  # seconds of wall time, summed over resumes
    timeout: float = SandboxLimits.timeout_s
    memory_mb: int = SandboxLimits.memory_mb
    unsafe_no_sandbox: bool = False

    def resolved(self) -> "ESConfig":
        """Checked, with `timesteps` 0 meaning the suite's own budget.

        Raises:
            ESConfigError: an option no run can use.
        """
        config = dataclasses.replace(self, timesteps=self.timesteps or None)
        try:
            config.seed_values = parse_seed_values(config.seed_values)
        except SeedError as error:
            raise ESConfigError(str(error)) from error
        if config.seed_values is not None:
            config.train_seeds = len(config.seed_values)
        if config.task not in FAMILIES:
            raise ESConfigError(
                f"black-box ES meta-learns the drift (LPO) or optimizer (OPEN-lite) task, "
                f"not {config.task!r}"
            )
        if config.hidden is None:
            config.hidden = FAMILIES[config.task].default_hidden
        try:
            get_suite(config.suite)
        except UnknownSuite as error:
            raise ESConfigError(str(error).strip("'\"")) from error
        checks = [
            (config.population >= 2 and config.population % 2 == 0, "--population must be even"),
            (config.generations >= 1, "--generations must be at least 1"),
            (config.hidden >= 1, "--hidden must be at least 1"),
            (config.member_seeds >= 1, "--member-seeds must be at least 1"),
            (config.train_seeds >= 1, "--train-seeds must be at least 1"),
            (config.export_every >= 1, "--export-every must be at least 1"),
            (config.sigma > 0 and config.lr > 0, "--sigma and --lr must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise ESConfigError(message)
        return config

    def cascade_settings(self) -> CascadeSettings:
        """How the exports are scored: the same cascade (and seeds) as discover's children."""
        return CascadeSettings(
            suite=self.suite,
            seeds=self.train_seeds,
            seed_values=self.seed_values,
            total_timesteps=self.timesteps,
            timeout_s=self.timeout,
            memory_mb=self.memory_mb,
            heldout=self.heldout,
            validation=True,  # an export is a final product: every role is reported
            unsafe_no_sandbox=self.unsafe_no_sandbox,
            probe_seed=0 if self.seed_values else None,
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def hash(self) -> str:
        """What defines the search (a resume must match it); budgets and limits may change."""
        fields = {k: v for k, v in self.to_dict().items() if k not in BUDGETS}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
