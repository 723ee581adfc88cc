"""The options of a discovery run, their defaults, and loading them from a TOML file.

Precedence: command-line option > config file (`--config file.toml`) > the defaults below.
A config file holds the same names as the CLI's options (dashes or underscores), at the top
level or under a `[discover]` table, e.g.

    task = "drift"
    suite = "classic"
    budget = 24
    seeds = 2
    [discover]          # optional; same keys
    islands = 3

The default demo. `metarl discover` with no arguments must finish on a 2-core CPU within 10
minutes including the seeds' evaluation and the baselines. A full `classic` evaluation (5e5
steps per environment, 4 seeds) costs about a minute per candidate there, so the defaults
shorten the per-environment budget to 1e5 steps and use 2 seeds: a candidate then costs ~18 s
(XLA compilation, ~6-7 s per environment, dominates; training is ~2 s), the baselines plus the
two seeds ~80 s with a cold cache, and the default 12 children finish in ~5 minutes on a quiet
2-core machine (measured: 10 children in 4m20s, cold cache). Budgets count work: the run
ends after its `budget` children however long a loaded machine takes for them. `max_time` is a
wall-time cap only when asked for (`--max-time 30m`); even then the seed programs and one
generation are scored first, so that every run ends with children on its leaderboard.
Pass `--timesteps 500000 --seeds 4` (or `timesteps = 0`: the suite's own budget) for the
paper-scale setting.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from metarl.discovery.proposers import PROPOSERS
from metarl.errors import USAGE, MetarlError
from metarl.evaluation.fidelity import DISCOVERY_RUNGS, FIDELITIES, validate_rungs
from metarl.evaluation.protocols import UnknownProtocol, get_protocol
from metarl.evaluation.seeds import SeedError, parse_seed_values
from metarl.evaluation.settings import CascadeSettings, validate_rates
from metarl.evaluation.text import redact_config
from metarl.tasks import UnknownTask, get_task


class ConfigError(MetarlError, ValueError):
    """A bad option or config file; the message is one line for the user."""

    exit_code = USAGE


@dataclass
class DiscoverConfig:
    task: str = "drift"
    suite: str = CascadeSettings.suite
    proposer: str = "mutation"
    # budgets
    budget: int = 12  # children to propose (seeds are not counted)
    # seconds of wall time (summed over resumes), applied after the first generation; None:
    # no limit (the default: the candidate budget ends the run)
    max_time: float | None = None
    max_cost: float | None = None  # USD of LLM calls; None: no limit
    # evaluation
    workers: int = 1
    # where sandboxed workers run (evaluation/executors.py; never part of a score): "local"
    # (this machine; `devices` pins one worker per accelerator) or "ray" (a cluster at
    # `ray_address`); a resume may change all three
    executor: str = "local"
    ray_address: str | None = None
    devices: list[str] = field(default_factory=list)
    # local, without devices: a batch's training in this many shares at once, one trainer
    # process each (XLA trains one per core on a CPU); scores do not change
    trainers: int = 1
    rng_seed: int = 0  # the search's RNG seed (`--rng-seed`): selection, proposals, LLM choice
    seeds: int | None = 2  # training seeds per evaluation; None: the suite's default
    # pinned training seed values (`--seed-values 0,1`; recorded); None: drawn per batch from
    # the run's secret pool (evaluation/seeds.py)
    seed_values: list[int] | None = None
    # per-environment budget; None/0: the protocol's on its suite, else the suite's own
    timesteps: int | None = None
    short_timesteps: int | None = None  # the cascade's short run; None: derived by the cascade
    short_threshold: float = CascadeSettings.short_run_threshold
    skip_short: bool = False
    # multi-fidelity (evaluation/fidelity.py): "rungs" stops a child clearly below half the
    # baseline's progress at a rung of each training env's run; "full": every child trains
    # its whole budget. None: the protocol's (`minatar-cpu`: rungs), else full: over every
    # generation measured they saved 1.00-1.05x of the env steps (benchmarks/RESULTS.md)
    fidelity: str | None = None
    rungs: list[float] = field(default_factory=lambda: list(DISCOVERY_RUNGS))
    timeout: float = CascadeSettings.timeout_s  # per evaluation, seconds
    memory_mb: int = CascadeSettings.memory_mb
    # run candidates without bubblewrap: NOT a security boundary (see README, Safety)
    unsafe_no_sandbox: bool = False
    heldout: bool = True  # score held-out envs for seeds and confirmed elites (leaderboard only)
    # population
    islands: int = 2
    population: int = 6  # members per island
    children: int = 4  # children per generation (one in conversation mode)
    crossover: float = 0.2
    tournament: int = 3
    novelty: float = 0.3
    migration_interval: int = 2
    inspirations: int = 2
    # race a would-be incumbent against the incumbent on the suite's validation envs, on fresh
    # seeds, before it may take its place (False: the best training score wins, unraced)
    confirm: bool = True
    confirm_seeds: int | None = None  # seeds per validation round; default: twice `seeds`
    race_seeds: int | None = None  # the most validation seeds a contender gets; default 3 rounds
    # the chance that any race of the run calls a challenger BETTER by luck: spent over the
    # run's races and their looks (evaluation/statistics.py race_plan)
    selection_error: float = 0.05
    # the race's winner is also trained, paired with the incumbent on fresh seeds, at this many
    # times `timesteps` on the validation envs, and refused when significantly worse there (a
    # drift that learns fast, then collapses: discovery/races.py); 0: off. None: the
    # protocol's (`quick`: 5), else off
    stability: float | None = None
    protocol: str = "quick"  # the evaluation protocol's name (evaluation/protocols.py), recorded
    # learning-rate sweep of every evaluation ("5": a 5-rate log grid around each env's tuned
    # rate; "1e-4,3e-4": those rates), its aggregation ("best" | "mean"); the test envs are
    # measured at the one rate the validation rounds chose
    lr_sweep: str | None = None
    lr_aggregation: str = CascadeSettings.lr_aggregation
    # draw each generation's training environments from the suite's distribution by a
    # curriculum (rl/environments/curriculum.py: uniform | plr | groove) instead of the suite's
    # fixed ones; None: fixed. `curriculum_levels` per generation (default: as many as the
    # suite lists).
    curriculum: str | None = None
    curriculum_levels: int | None = None
    curriculum_buffer: int = 64
    dedup_retries: int = 3  # re-proposals when a proposal repeats an archived program
    # rewrite the prompt's "what worked / what failed" notes from the archive every this many
    # generations (discovery/guidance.py: the LLM proposer's model, else a rule); 0: never
    guidance_every: int = 3
    # near-duplicates, rejected before training (discovery/novelty.py, evaluation/
    # near_duplicates.py). `code_novelty`: re-ask a proposal whose normalised code is at least
    # this similar (0..1) to a program of the run that trained; 1.0: only the same program
    # renamed/reformatted; 0: off. 0.995 keeps every one-edit mutation of a seed-sized program
    # (<= 0.993 measured) and rejects one-token edits of programs over ~200 tokens only.
    # `behaviour_novelty`: stop a candidate after the probes when its outputs on the probe
    # batch are within this relative distance of a run candidate's; 0: off.
    code_novelty: float = 0.995
    behaviour_novelty: float = CascadeSettings.behaviour_novelty
    # LLM proposer (forwarded to build_llm_proposer by the proposer registry)
    models: list[str] = field(default_factory=list)
    api_base: str | None = None
    mode: str = "population"
    # how each LLM call's model is picked among several `models`: "bandit" (Thompson sampling
    # on improvement per dollar, per second for unpriced models: proposers/llm/bandit.py) or
    # "weights" (the fixed `provider/model:weight` shares); a resume keeps the run's
    model_choice: str = "bandit"
    llm_timeout: float = 120.0
    max_concurrency: int = 4
    temperature: float | None = None

    def with_protocol(self) -> "DiscoverConfig":
        """A copy with the protocol's settings (evaluation/protocols.py) in every field still at
        its default: the protocol bundles defaults, an explicit option overrides it.

        Raises:
            ConfigError: an unknown protocol.
        """
        try:
            protocol = get_protocol(self.protocol)
        except UnknownProtocol as error:
            raise ConfigError(str(error)) from None
        defaults = type(self)()
        changes = {
            key: value
            for key, value in protocol.settings.items()
            if hasattr(self, key) and getattr(self, key) == getattr(defaults, key)
        }
        # a protocol's budget is its suite's: another suite trains its own budget (Suite.budget),
        # as `metarl evaluate` trains it (`discover --suite smoke` once trained 2x evaluate's)
        if changes.get("suite", self.suite) != protocol.settings.get("suite", self.suite):
            changes.pop("timesteps", None)
        return dataclasses.replace(self, **changes)

    def resolved(self) -> "DiscoverConfig":
        """Validated copy with protocol and suite defaults filled in; raises ConfigError."""
        # lazy: the executors import the sandbox, the suites draw their environments with
        # numpy; `metarl discover --help` reads this module's defaults without them
        from metarl.evaluation.executors import ExecutorSettings
        from metarl.rl.suites import UnknownSuite, get_suite
        from metarl.tasks import meta_task_problem

        self = self.with_protocol()
        try:
            get_task(self.task)
        except UnknownTask as error:
            raise ConfigError(str(error)) from None
        try:
            suite = get_suite(self.suite)
        except UnknownSuite as error:
            raise ConfigError(str(error)) from None
        problem = meta_task_problem(self.task, self.suite)
        if problem:
            raise ConfigError(problem)
        if self.proposer not in PROPOSERS:
            raise ConfigError(
                f"unknown proposer {self.proposer!r}; choose {' or '.join(PROPOSERS)}"
            )
        try:
            ExecutorSettings(
                self.executor, tuple(self.devices), self.ray_address, trainers=self.trainers
            )
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if self.mode not in ("population", "conversation"):
            raise ConfigError(f"unknown mode {self.mode!r}; choose population or conversation")
        if self.model_choice not in ("bandit", "weights"):
            raise ConfigError(
                f"unknown model choice {self.model_choice!r}; choose bandit or weights"
            )
        if PROPOSERS[self.proposer].needs_models and not self.models:
            raise ConfigError(
                f"--proposer {self.proposer} needs at least one --model PROVIDER/MODEL"
            )
        checks = [
            ("budget", self.budget, 0),
            ("workers", self.workers, 1),
            ("trainers", self.trainers, 1),
            ("islands", self.islands, 1),
            ("population", self.population, 1),
            ("children", self.children, 1),
            ("tournament", self.tournament, 1),
            ("migration_interval", self.migration_interval, 1),
            ("dedup_retries", self.dedup_retries, 0),
            ("guidance_every", self.guidance_every, 0),
            ("inspirations", self.inspirations, 0),
        ]
        for name, value, low in checks:
            if value < low:
                raise ConfigError(f"{name.replace('_', '-')} must be at least {low}, got {value}")
        if self.seeds is not None and self.seeds < 1:
            raise ConfigError(f"seeds must be at least 1, got {self.seeds}")
        try:
            seed_values = parse_seed_values(self.seed_values)
        except SeedError as error:
            raise ConfigError(str(error)) from None
        if not 0.0 <= self.crossover <= 1.0:
            raise ConfigError(f"crossover must be a probability in [0, 1], got {self.crossover}")
        if not (0.0 <= self.code_novelty <= 1.0 and self.behaviour_novelty >= 0.0):
            raise ConfigError(
                "code-novelty is a similarity in [0, 1] and behaviour-novelty a distance >= 0, "
                f"got {self.code_novelty} and {self.behaviour_novelty}"
            )
        for name in ("max_time", "max_cost", "timeout"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name.replace('_', '-')} must be positive, got {value}")
        out = dataclasses.replace(
            self, models=list(self.models), devices=list(self.devices), seed_values=seed_values
        )
        if seed_values is not None:
            out.seeds = len(seed_values)  # the values say how many
        if not out.seeds:
            out.seeds = suite.default_seeds
        out.timesteps = suite.budget(out.timesteps)
        if out.confirm_seeds is None:
            out.confirm_seeds = 2 * out.seeds
        if out.race_seeds is None:
            out.race_seeds = 3 * out.confirm_seeds
        if out.lr_sweep is not None:
            out.lr_sweep = str(out.lr_sweep).strip() or None
        try:
            validate_rates(out.lr_sweep, out.lr_aggregation)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if out.curriculum is not None:
            _check_curriculum(out, suite)
        if out.fidelity is None:
            out.fidelity = "full"
        out.stability = float(out.stability or 0.0)
        if out.stability != 0.0 and not 1.0 < out.stability <= 100.0:
            raise ConfigError(
                f"stability is {out.stability:g}: a multiple of the budget above 1 (and at most "
                "100), or 0 for no stability check"
            )
        if out.fidelity not in FIDELITIES:
            raise ConfigError(
                f"unknown fidelity {out.fidelity!r}; choose " + " or ".join(FIDELITIES)
            )
        try:
            validate_rungs(out.rungs)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if not 0.0 < float(out.selection_error) < 1.0:
            raise ConfigError(
                f"selection_error is {out.selection_error}: a chance strictly between 0 and 1"
            )
        if out.race_seeds < max(2, out.confirm_seeds):
            raise ConfigError(
                f"race_seeds is {out.race_seeds}: at least confirm_seeds ({out.confirm_seeds}) "
                "and 2 (an interval needs two runs)"
            )
        if out.mode == "conversation":
            out.children = 1
            out.islands = 1
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def hash(self) -> str:
        """The options' digest, over their archived form: credentials in a URL (`api_base`) are
        never archived, so they neither change it nor can be recovered from it."""
        archived = redact_config(self.to_dict())
        return hashlib.sha256(json.dumps(archived, sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict) -> "DiscoverConfig":
        """The config of options `data` (an archived run's, or collected ones): unknown keys
        are ignored, and keys written by an older metarl are renamed (`upgrade_keys`)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in upgrade_keys(data).items() if k in known})


# keys an older metarl wrote, archived in runs' configs and found in users' TOML files -> their
# name now; the old name is read only when the new one is absent
RENAMED = {"seed": "rng_seed"}  # the search's RNG seed (not the training seeds, `seeds`)


def upgrade_keys(data: dict) -> dict:
    """A copy of options `data` with the keys of `RENAMED` under their new name (an old key
    is dropped when the new one is present too), so an old archive's run still resumes."""
    out = dict(data)
    for old, new in RENAMED.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(DiscoverConfig)}


def _check_type(name: str, value):
    kind = FIELD_TYPES[name]
    if value is None and "None" in kind:
        return None
    if kind.startswith("list"):
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise ConfigError(f"config option {name!r} must be a list of strings")
    if kind.startswith("bool"):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config option {name!r} must be true or false, got {value!r}")
    if kind.startswith("int"):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"config option {name!r} must be an integer, got {value!r}")
    if kind.startswith("float"):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"config option {name!r} must be a number, got {value!r}")
    if kind.startswith("str"):
        if isinstance(value, str):
            return value
        raise ConfigError(f"config option {name!r} must be a string, got {value!r}")
    return value


ALIASES = {"model": "models", "llm_timeout_s": "llm_timeout", "max_time_s": "max_time"}


def load_config_file(path: str | Path) -> dict:
    """The options a TOML file sets (validated names and types); raises ConfigError."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path} is not valid TOML: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read config file {path}: {error}") from None
    section = data.pop("discover", {})
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [discover] must be a table")
    merged = {**data, **section}
    named = {}  # option name -> (the file's key, its value)
    for key, value in merged.items():
        name = key.replace("-", "_")
        named[ALIASES.get(name, name)] = (key, value)
    out = {}
    for name, (key, value) in upgrade_keys(named).items():
        if name not in FIELD_TYPES:
            close = [f for f in FIELD_TYPES if f.startswith(name[:3])]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"config file {path}: unknown option {key!r}{hint}")
        out[name] = _check_type(name, value)
    return out


def _check_curriculum(config: DiscoverConfig, suite) -> None:
    """A curriculum needs a suite of drawn environments and a known kind; fills the default
    number of levels per generation.

    Raises:
        ConfigError: one line for the user.
    """
    # lazy: numpy, as in `resolved`
    from metarl.rl.environments.curriculum import CURRICULA
    from metarl.rl.suites import SUITES

    if config.curriculum not in CURRICULA:
        raise ConfigError(
            f"--curriculum is one of {', '.join(CURRICULA)}, not {config.curriculum!r}"
        )
    if suite.distribution is None:
        drawn = ", ".join(name for name, s in SUITES.items() if s.distribution is not None)
        raise ConfigError(f"--curriculum draws environments from a distribution suite: {drawn}")
    if config.curriculum_levels is None:
        config.curriculum_levels = len(suite.envs)
    if config.curriculum_levels < 1 or config.curriculum_buffer < 1:
        raise ConfigError("--curriculum-levels and the curriculum buffer must be at least 1")
