"""The one copy of every evaluation default: cascade settings, sandbox limits, the run plan.

The CLI's help, the discovery config and the sandbox worker all read their defaults from here
(the worker receives the parent's settings as a dict and rebuilds them with `CascadeSettings`),
so a default is changed in one place.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Sequence

from metarl.evaluation.baseline_cache import compilation_cache_dir
from metarl.evaluation.fidelity import RUNG_BAR, RUNG_CONFIDENCE, rung_updates, validate_rungs
from metarl.evaluation.seeds import check_values
from metarl.rl.configs import PPOConfig
from metarl.rl.lr_sweep import parse_sweep

# how a swept env's per-rate scores become its score: DiscoBench's best rate, or the mean
LR_AGGREGATIONS = ("best", "mean")
# env steps a baseline job gets one `timeout_s` for (CascadeSettings.baseline_limit): at 900 s,
# ~560 steps/s. Measured on 2 busy cores: Seaquest-MinAtar, the slowest MinAtar game, trains 4
# seeds at ~2.0k steps/s (Breakout at ~23k)
BASELINE_STEPS_PER_LIMIT = 500_000


@dataclass
class SandboxLimits:
    """What one sandboxed worker may use; the cascade derives them from CascadeSettings."""

    timeout_s: float = 900.0  # wall clock from job hand-off to result, then SIGKILL to the group
    memory_mb: int = 8192  # RLIMIT_AS (CPU) and the parent's resident-memory watchdog
    cpu_s: float | None = None  # RLIMIT_CPU; None = timeout_s * cores + 60
    max_file_mb: int = 64  # RLIMIT_FSIZE: largest file (stdout included) a worker may write
    nofile: int = 1024  # RLIMIT_NOFILE
    output_chars: int = 8192  # captured stdout+stderr kept in Outcome.stdout
    startup_timeout_s: float = 180.0  # spawn -> ready (imports), before any candidate code
    memory_poll_s: float = 0.25
    tmpfs_mb: int = 64  # everything a worker may write, in total: /tmp (cwd, HOME) and /dev/shm
    unsafe_no_sandbox: bool = False  # run without bubblewrap (NOT a security boundary)
    # JAX's persistent compilation cache (a host directory), writable by trainers only
    compilation_cache: str | None = None

    def cpu_limit(self) -> int:
        """RLIMIT_CPU in seconds: `cpu_s`, or the wall-clock limit times the cores, plus 60."""
        if self.cpu_s is not None:
            return int(self.cpu_s)
        return int(self.timeout_s * (os.cpu_count() or 1) + 60)


@dataclass
class CascadeSettings:
    """Everything an evaluation depends on: suite, budgets, seeds, thresholds and limits.

    The limits' defaults are SandboxLimits' own; the CLI and the discovery config read their
    defaults from here.
    """

    suite: str = "classic"
    seeds: int = 4  # number of training seeds per evaluation (values drawn: evaluation/seeds.py)
    # pinned training seed values (`--seed-values`; recorded as pinned); None: each batch
    # draws `seeds` values from the secret pool. The evaluator sets them per batch before any
    # job leaves the parent, so the stages always train on explicit values.
    seed_values: list[int] | None = None
    # the secret pool batches draw from (a run's, kept in its state); None: the evaluator
    # draws one. Never sent to a worker, logged or part of an evaluation key.
    seed_pool: list[int] | None = None
    # stop after stage 3 when the normalised score on the suite's first env is below this
    # (0 = random policy, 1 = the task's baseline seed, same seeds and budget)
    short_run_threshold: float = 0.25
    total_timesteps: int | None = None  # override the suite's per-env budget (tests use tiny ones)
    short_timesteps: int | None = None  # override the suite's short budget (capped at the full one)
    timeout_s: float = SandboxLimits.timeout_s  # the most wall clock any sandboxed stage may take
    trace_timeout_s: float = 60.0  # the tracer: candidate Python, its probes and the export
    train_timeout_factor: float = 10.0  # training limit: this x the baseline's time for the work
    train_timeout_floor_s: float = 120.0  # ... but at least this (compile time varies)
    memory_mb: int = SandboxLimits.memory_mb  # address-space limit and memory watchdog
    heldout: bool = True  # also score the suite's test envs (never used for selection)
    validation: bool = False  # also score the suite's validation envs (decide the incumbent)
    # score the training envs (False: only the validation and/or test roles, no short run)
    train: bool = True
    # learning-rate sweep (metarl/rl/lr_sweep.py `parse_sweep`): "5" = 5 rates on a log grid
    # around each env's tuned rate, "1e-4,3e-4" = those rates on every env; None: no sweep.
    # Every rate is one more row of the same compiled program (the baseline swept alike).
    lr_sweep: str | None = None
    lr_aggregation: str = "best"  # a swept env's score: "best" rate or "mean" over the rates
    lr_scale: float = 1.0  # every env's tuned rate times this (the rate chosen on validation)
    skip_short: bool = False
    # multi-fidelity (evaluation/fidelity.py): fractions of each training env's run at which a
    # candidate clearly below `rung_bar` of the baseline's progress on the same seeds stops;
    # None or []: none (every candidate past the short run trains its whole budget)
    rungs: list[float] | None = None
    rung_confidence: float = RUNG_CONFIDENCE  # the one-sided confidence of "clearly below"
    rung_bar: float = RUNG_BAR  # the fraction of the baseline's progress a rung asks for
    # stop a candidate after the probes as a near-duplicate of a known one whose behaviour
    # descriptor is within this relative distance (evaluation/near_duplicates.py); 0: off.
    # Which candidates are known is the caller's (a run's own), so it is no part of a score.
    behaviour_novelty: float = 1e-3
    probe_seed: int | None = None  # None: fresh random probe inputs for every evaluation
    cpu_s: float | None = SandboxLimits.cpu_s  # RLIMIT_CPU; None: timeout_s * cores + 60
    max_file_mb: int = SandboxLimits.max_file_mb  # RLIMIT_FSIZE: the most output a worker writes
    # only these environments of the suite (training envs in this order, held-out envs only
    # when listed); None: the whole suite. For benchmarks and debugging, not for selection.
    envs: list[str] | None = None
    # the training role's environments when a curriculum draws them per generation (drawn
    # from the suite's distribution, rl/environments/distributions.py); None: the suite's `envs`
    train_envs: list[str] | None = None
    # Run candidates WITHOUT bubblewrap (rlimits and a network namespace only): candidate code
    # can then read files and the environment of this machine. Only for machines where
    # bubblewrap cannot run, and only with candidates you trust.
    unsafe_no_sandbox: bool = False
    # trainers keep compiled programs in JAX's persistent cache (METARL_CACHE_DIR/xla)
    compilation_cache: bool = True

    def limits(self) -> SandboxLimits:
        """The sandbox limits these settings ask for."""
        return SandboxLimits(
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            cpu_s=self.cpu_s,
            max_file_mb=self.max_file_mb,
            unsafe_no_sandbox=self.unsafe_no_sandbox,
            compilation_cache=(str(compilation_cache_dir()) if self.compilation_cache else None),
        )

    def baseline_limit(self, segments: Sequence[PlannedRun], seeds: int) -> float:
        """Wall clock for one baseline trainer job over `segments` on `seeds` seeds: one
        `timeout_s` (at least 10 minutes) per segment and per BASELINE_STEPS_PER_LIMIT env
        steps of it. The baseline is the evaluator's own program, so its limit only stops a
        hang, and it grows with the work: a validation round's baseline at minatar-cpu's scale
        (Seaquest-MinAtar, 4 seeds x 1e6 steps: ~2,000 s of gymnax's Seaquest on 2 busy
        cores) ran out of a flat 900 s, twice in one run, and each time the race scored nothing.

        Args:
            segments: the job's planned segments (whole envs).
            seeds: how many seeds each segment trains.

        Returns:
            Seconds.
        """
        unit = max(self.timeout_s, 600.0)
        steps = [seeds * entry.config.total_timesteps for entry in segments]
        return unit * sum(max(1.0, n / BASELINE_STEPS_PER_LIMIT) for n in steps)

    def job_settings(self) -> dict:
        """The settings as a JSON-ready dict (sent to the worker, which rebuilds them); the
        secret seed pool stays here."""
        data = asdict(self)
        data["seed_pool"] = None
        return data

    def training_seeds(self) -> list[int]:
        """The seed values a trainer trains on: `seed_values` (set per batch by the evaluator).

        Raises:
            ValueError: no values were set (seeds are never implied as 0..seeds-1).
        """
        if not self.seed_values:
            raise ValueError(
                "no training seed values: the evaluator draws them per batch "
                "(CascadeSettings.seed_values)"
            )
        return [int(seed) for seed in self.seed_values]


@dataclass(frozen=True)
class PlannedRun:
    """One scored segment of the cascade: its stage, config, where it stops, and whether its
    env is held out.

    A short run is the first segment of the first training env's full run (same config, same
    compiled program, learning rate annealed over the whole run), stopped at `updates`; the
    full run continues it from there. A rung is a "short" segment of any training env's run at
    which the candidate is tested against the baseline (evaluation/fidelity.py).
    """

    stage: str  # "short" | "full"
    config: PPOConfig  # at this segment's learning rate
    role: str  # the env's role in the suite: train | validation | test
    updates: int  # the update this segment stops at (config.num_updates for a full run)
    # the learning rates its program sweeps (this segment is the row at `config.lr`); ()
    sweep: tuple[float, ...] = ()
    # a rung of multi-fidelity evaluation (evaluation/fidelity.py): the fraction of the run it
    # stops at, decided against the baseline's same segment; None: the short run or a full run
    rung: float | None = None

    @property
    def heldout(self) -> bool:
        """A test env: scored and reported, never read by selection."""
        return self.role == "test"

    @property
    def key(self) -> str:
        """Identifies the segment's reference (baseline and random returns); a swept row's
        numbers depend on its program's rows, so the sweep is part of it."""
        key = f"{self.config.config_hash()}@{self.updates}"
        if self.sweep:
            key += "~" + ",".join(f"{lr:.6g}" for lr in self.sweep)
        return key

    @property
    def program(self) -> tuple:
        """What decides its compiled program: the config (its rate aside when swept)."""
        return (self.config.replace(lr=0.0), self.sweep) if self.sweep else (self.config, ())

    @property
    def steps(self) -> int:
        """Environment steps trained by the end of this segment."""
        return self.updates * self.config.batch_size


def validate_rates(lr_sweep: str | None, aggregation: str) -> None:
    """Refuse a malformed learning-rate sweep or aggregation.

    Raises:
        ValueError: one line saying what is wrong.
    """
    if aggregation not in LR_AGGREGATIONS:
        raise ValueError(
            f"unknown lr aggregation {aggregation!r}; choose " + " or ".join(LR_AGGREGATIONS)
        )
    if lr_sweep:
        parse_sweep(str(lr_sweep), 1.0)


def sweep_rates(settings: CascadeSettings, config: PPOConfig) -> tuple[float, ...]:
    """The learning rates `settings` sweep on an env whose tuned config is `config` (its rate
    already scaled by `lr_scale`); () without a sweep.

    Raises:
        ValueError: a malformed `lr_sweep`.
    """
    if not settings.lr_sweep:
        return ()
    return parse_sweep(str(settings.lr_sweep), config.lr)


def run_configs(settings: CascadeSettings) -> list[PPOConfig]:
    """The distinct configs of `plan_runs(settings)`, in plan order: the training programs a
    trainer job traces call sizes for (the trainer and the parent agree on the order)."""
    return list(dict.fromkeys(entry.config for entry in plan_runs(settings)))


def plan_runs(settings: CascadeSettings) -> list[PlannedRun]:
    """Every scored segment stages 3 and 4 train, in order (the trainer and the parent agree).

    The short run is the first `short_timesteps` (default: the suite's short budget) of the
    first training env's full run; when that is the whole run, the short run is the full run
    on that env and the plan holds it once, as "short", then "full" with the same key. Then
    the full runs by role: train, validation (with `validation`), test (with `heldout`);
    `train=False` leaves out the training envs and the short run (a validation round).

    With a learning-rate sweep every full run is one segment per rate (one program: the rate
    is a vmapped axis), and the short run is the row at the rate nearest the env's tuned one.
    """
    # lazy: the suites draw their environments with numpy at import; `metarl --help` reads
    # this module's defaults
    from metarl.rl.suites import get_suite

    suite = get_suite(settings.suite)
    chosen = settings.envs

    def picked(envs: tuple[str, ...], wanted: bool) -> list[str]:
        return [e for e in envs if chosen is None or e in chosen] if wanted else []

    def tuned(env: str) -> PPOConfig:
        config = suite.config(env, settings.total_timesteps)
        scale = float(settings.lr_scale)
        return config if scale == 1.0 else config.replace(lr=config.lr * scale)

    pool = tuple(settings.train_envs) if settings.train_envs else suite.envs
    train = [e for e in (chosen or pool) if e in pool] if settings.train else []
    plan = []
    if train and not settings.skip_short:
        full = tuned(train[0])
        rates = sweep_rates(settings, full)
        if rates:
            nearest = min(rates, key=lambda lr: (abs(math.log(lr / full.lr)), lr))
            full = full.replace(lr=nearest)
        short = int(settings.short_timesteps or suite.short_budget)
        updates = min(full.num_updates, max(1, -(-short // full.batch_size)))
        plan.append(PlannedRun("short", full, "train", updates, rates))

    def rung_runs(env: str) -> list[PlannedRun]:
        """The env's rungs, in order, at the rate nearest its tuned one (as the short run)."""
        config = tuned(env)
        rates = sweep_rates(settings, config)
        if rates:
            nearest = min(rates, key=lambda lr: (abs(math.log(lr / config.lr)), lr))
            config = config.replace(lr=nearest)
        # the first env's short run is a segment of the same run: the segments go in order
        runs = [plan.pop()] if plan and plan[-1].config == config else []
        earlier = {entry.updates for entry in runs}
        for rung in sorted(settings.rungs or ()):
            updates = rung_updates(rung, config.num_updates)
            if updates is not None and updates not in earlier:
                earlier.add(updates)
                runs.append(PlannedRun("short", config, "train", updates, rates, rung=rung))
        runs.sort(key=lambda entry: entry.updates)
        # a rung ends a segment; the next must be at least its stop's score window long (the
        # run's last 10%: rl/ppo.py), or the rung would change the next score
        kept, after = [], config.num_updates
        for entry in reversed(runs):
            if entry.rung is None or after - entry.updates >= max(1, after // 10):
                kept.insert(0, entry)
                after = entry.updates
        return kept

    def full_runs(env: str, role: str) -> list[PlannedRun]:
        config = tuned(env)
        rates = sweep_rates(settings, config)
        if not rates:
            return [PlannedRun("full", config, role, config.num_updates)]
        return [
            PlannedRun("full", config.replace(lr=lr), role, config.num_updates, rates)
            for lr in rates
        ]

    for env in train:
        plan += rung_runs(env)
        plan += full_runs(env, "train")
    for env in picked(suite.validation, settings.validation):
        plan += full_runs(env, "validation")
    for env in picked(suite.heldout, settings.heldout):
        plan += full_runs(env, "test")
    return plan


def validate(settings: CascadeSettings) -> None:
    """Refuse settings no evaluation can run with.

    Raises:
        UnknownSuite: the suite does not exist.
        ValueError: envs outside the suite, or fewer than one training seed.
    """
    from metarl.rl.suites import get_suite  # lazy: as in plan_runs

    validate_rungs(settings.rungs or ())
    suite = get_suite(settings.suite)  # UnknownSuite, a KeyError with a readable message
    if settings.envs is not None:
        unknown = [e for e in settings.envs if e not in suite.all_envs]
        known = (
            f"training: {', '.join(suite.envs)}; validation: "
            f"{', '.join(suite.validation) or 'none'}; test: {', '.join(suite.heldout) or 'none'}"
        )
        if unknown:
            raise ValueError(
                f"unknown environment {', '.join(map(repr, unknown))} for suite "
                f"{suite.name!r} (its envs, {known})"
            )
        if settings.train and not [e for e in settings.envs if e in suite.envs]:
            raise ValueError(
                f"envs {settings.envs} must include a training env of suite {suite.name!r} "
                f"({known})"
            )
    if settings.train_envs:
        from metarl.rl.environments.names import split_variant  # lazy: names only, read when needed

        distribution = suite.distribution
        drawn = distribution is not None and all(
            split_variant(e)[0] == split_variant(distribution.env(0))[0]
            for e in settings.train_envs
        )
        if not drawn:
            raise ValueError(
                f"train_envs are draws of the suite's distribution; suite {suite.name!r} "
                + ("has none" if distribution is None else f"draws {distribution.base} envs")
            )
    validate_rates(settings.lr_sweep, settings.lr_aggregation)
    if not (math.isfinite(float(settings.lr_scale)) and float(settings.lr_scale) > 0):
        raise ValueError(f"lr_scale must be a positive number, got {settings.lr_scale!r}")
    if not plan_runs(settings):  # also parses lr_sweep: a malformed one is a ValueError
        raise ValueError(f"suite {suite.name!r}: these settings score no environment")
    if int(settings.seeds) < 1:
        raise ValueError("seeds must be at least 1")
    if settings.seed_values is not None:
        check_values(settings.seed_values)  # SeedError, a ValueError
        if len(settings.seed_values) != int(settings.seeds):
            raise ValueError(
                f"{len(settings.seed_values)} seed values for {settings.seeds} seeds; pass "
                "as many values as seeds (or only the values)"
            )


@dataclass(frozen=True)
class Reference:
    """What a config's scores are normalised against, from this process's verified cache."""

    baseline_mean: float
    random_mean: float
    seconds: float  # the baseline's compile + run time: the yardstick for training limits
    run: dict  # the baseline's EnvRun, as a dict
