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
from metarl.rl.environments.curriculum import CURRICULA
from metarl.rl.suites import SUITES, UnknownSuite, get_suite
from metarl.tasks import get_network_task, is_network_task, network_task_names


class ESConfigError(MetarlError, ValueError):
    """A bad option; the message is one line for the user."""

    exit_code = USAGE


# options a resume may change
BUDGETS = ("generations", "max_time", "timeout", "memory_mb", "unsafe_no_sandbox")

# options only an LPG run reads (left out of other runs' hashes, so their resumes still match)
LPG_OPTIONS = (
    "curriculum",
    "buffer_size",
    "replay_prob",
    "staleness",
    "lifetime_conditioning",
    "env_workers",
    "eval_updates",
)

# (sigma, sigma_decay, sigma_floor, lr, lr_decay, lr_floor) of the program families' ES:
# Goldie et al.'s black-box LPO. A network task declares its own (tasks/lpg: GROOVE's LPG-ES).
FAMILY_SCHEDULE = (0.03, 0.99, 0.01, 0.03, 0.99, 0.001)
SCHEDULE_FIELDS = ("sigma", "sigma_decay", "sigma_floor", "lr", "lr_decay", "lr_floor")


@dataclass
class ESConfig:
    task: str = "drift"
    suite: str = "classic"
    # the ES (paper defaults)
    population: int = 64  # members per generation (even: antithetic pairs)
    generations: int = 20
    # the meta-network's width; None: the task's (LPO 128, OPEN-lite 16, LPG's GRU 32)
    hidden: int | None = None
    # None: the task's schedule (FAMILY_SCHEDULE, or a network task's own)
    sigma: float | None = None
    sigma_decay: float | None = None
    sigma_floor: float | None = None
    lr: float | None = None
    lr_decay: float | None = None
    lr_floor: float | None = None
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
    # the LPG task (LPG_OPTIONS)
    curriculum: str = "uniform"  # uniform | plr | groove (rl/environments/curriculum.py)
    buffer_size: int = 256  # levels the curriculum's buffer holds (GROOVE: 4000)
    replay_prob: float = 0.5  # chance a generation replays buffered levels
    staleness: float = 0.3  # PLR's staleness coefficient
    lifetime_conditioning: bool = False  # TA-LPG: the network reads t/lifetime and log lifetime
    env_workers: int = 16  # environments per agent (GROOVE: 64)
    eval_updates: int | None = None  # an export's lifetime on named levels; None: longest drawn

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
        network = is_network_task(config.task)
        if config.task not in FAMILIES and not network:
            searched = [f"{name} ({family.network})" for name, family in FAMILIES.items()]
            searched += [
                f"{name} ({get_network_task(name).summary})" for name in network_task_names()
            ]
            raise ESConfigError(
                f"black-box ES meta-learns {', '.join(searched)}; not {config.task!r}"
            )
        declared = get_network_task(config.task) if network else None
        if config.hidden is None:
            config.hidden = (
                declared.default_hidden if declared else FAMILIES[config.task].default_hidden
            )
        schedule = declared.es_schedule if declared else FAMILY_SCHEDULE
        for name, default in zip(SCHEDULE_FIELDS, schedule):
            if getattr(config, name) is None:
                setattr(config, name, default)
        try:
            suite = get_suite(config.suite)
        except UnknownSuite as error:
            raise ESConfigError(str(error).strip("'\"")) from error
        if network:
            _check_lpg(config, suite)
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
        skip = BUDGETS if is_network_task(self.task) else BUDGETS + LPG_OPTIONS
        fields = {k: v for k, v in self.to_dict().items() if k not in skip}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _check_lpg(config: ESConfig, suite) -> None:
    """The LPG task's own checks (a grid suite, a known curriculum, sizes).

    Raises:
        ESConfigError: one line for the user.
    """
    distribution = suite.distribution
    if distribution is None or not distribution.grid:
        grids = ", ".join(
            name for name, s in SUITES.items() if s.distribution and s.distribution.grid
        )
        raise ESConfigError(f"the lpg task meta-trains on grid levels: --suite {grids}")
    checks = [
        (config.curriculum in CURRICULA, f"--curriculum is one of {', '.join(CURRICULA)}"),
        (config.buffer_size >= 1, "--buffer-size must be at least 1"),
        (0.0 <= config.replay_prob <= 1.0, "--replay-prob is a probability"),
        (0.0 <= config.staleness <= 1.0, "--staleness is between 0 and 1"),
        (config.env_workers >= 1, "--env-workers must be at least 1"),
        (config.eval_updates is None or config.eval_updates >= 1, "--eval-updates >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ESConfigError(message)
