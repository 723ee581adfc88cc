"""The cascade's sandboxed stages as plain functions: trace, probe and train, in-process.

Each takes typed settings and a `report(event, **data)` callback, so tests call them directly
and the sandbox worker (evaluation/worker.py) only wires them to its result channel:

- `trace_candidate`: the only function here that runs candidate Python. It loads the
  candidate, runs the task's probes on it (detailed, friendly reasons for the proposer) and
  exports it per element (rl/artifact.py). In production it runs in the *tracer*, a process the
  candidate owns once its code runs, so the parent treats what it returns as untrusted data.
- `evaluate_artifact`: stages 2-4 on an exported candidate, trusted code only: verifies the
  artifact, probes it again on inputs the tracer never saw, fingerprints it, and trains and
  scores it with the parent's references. Runs in the *trainer*.
- `train_baselines`: the task's baseline program on the requested configs, and each env's
  random return, for the parent's cache. Runs in a trainer that never sees a candidate.
"""

from __future__ import annotations

import builtins
import os
import resource
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

from metarl.evaluation.outcome import EnvScore, Outcome, env_score
from metarl.evaluation.settings import CascadeSettings, PlannedRun, plan_runs
from metarl.rl.artifact import ArtifactRejected, decode, encode, export_variants, load_variants
from metarl.rl.configs import PPOConfig
from metarl.rl.scoring import aggregate
from metarl.rl.training import EnvRun, random_policy_return, run_training
from metarl.tasks import Task
from metarl.tasks.candidate import candidate_namespace, load_function
from metarl.tasks.probing import describe_exception, fingerprint, register_candidate_source

Report = Callable[..., None]  # report(event, **data): progress for the parent


def ignore(event: str, **data) -> None:
    """A `report` that drops every event (in-process use without a listener)."""


class StageFailure(Exception):
    """The candidate fails the current stage; `reason` is written for the proposer to read."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class TraceResult:
    """What the tracer returns: an encoded artifact, or why there is none."""

    ok: bool
    artifact: dict | None = None
    reason: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        if self.ok:
            return {"ok": True, "artifact": self.artifact, "warnings": self.warnings}
        return {"ok": False, "reason": self.reason, "warnings": self.warnings}


@dataclass
class BaselineRuns:
    """The baseline program's runs (EnvRun dicts keyed by config hash) and random returns."""

    runs: list[dict]
    random: dict[str, float]
    timings: dict[str, float]

    def to_dict(self) -> dict:
        return {"runs": self.runs, "random": self.random, "timings": self.timings}


# --- stage 2, untrusted half: the candidate's Python ---------------------------------------------
def load_candidate(source: str, function_name: str) -> Callable:
    """Execute the candidate module in the restricted namespace (plus `print`, captured).

    Raises:
        StageFailure: the module does not run or does not define `function_name`.
    """
    register_candidate_source(source)
    namespace = candidate_namespace()
    namespace["__builtins__"] = {**namespace["__builtins__"], "print": builtins.print}
    try:
        code = compile(source, "<candidate>", "exec")
        exec(code, namespace)  # noqa: S102 - restricted namespace, sandboxed tracer process
    except Exception as error:
        raise StageFailure(
            describe_exception(error, "defining the candidate (running the module's top level)")
        ) from error
    function = namespace.get(function_name)
    if not callable(function):
        raise StageFailure(f"the candidate does not define a function `{function_name}`")
    return function


def trace_candidate(task: Task, source: str, probe_seed: int, platform: str) -> TraceResult:
    """Load the candidate, run the task's probes on it, and export it per element.

    Args:
        task: the task whose contract the candidate implements.
        source: the candidate's source code (already through the static check).
        probe_seed: seeds the probes' random inputs.
        platform: the JAX platform the artifact is exported for ("cpu", "cuda").

    Returns:
        The encoded artifact with the probes' warnings, or the reason there is none.
    """
    warnings: list[str] = []
    try:
        function = load_candidate(source, task.function_name)
        report = task.probes(function, int(probe_seed))
        warnings.extend(report.warnings)
        if not report.ok:
            raise StageFailure(report.reason)
        try:
            blobs = export_variants(task.per_element(function), task.element_signature, platform)
        except Exception as error:
            raise StageFailure(
                describe_exception(
                    error,
                    f"exporting {task.function_name} for one element (scalar inputs; the "
                    "trainer applies it to every element)",
                )
            ) from error
        try:
            load_variants(blobs, task.element_signature, platform)
        except ArtifactRejected as error:
            raise StageFailure(f"the exported program was refused: {error}") from error
    except StageFailure as failure:
        return TraceResult(ok=False, reason=failure.reason, warnings=warnings)
    except MemoryError:
        return TraceResult(
            ok=False,
            reason="ran out of memory while probing the candidate (MemoryError); keep "
            "intermediate arrays the size of the inputs",
            warnings=warnings,
        )
    return TraceResult(ok=True, artifact=encode(blobs), warnings=warnings)


# --- stages 2-4, trusted: the verified artifact ---------------------------------------------
class _StageClock:
    """The current stage, its wall time, and the report callback."""

    def __init__(self, report: Report):
        self.report = report
        self.timings: dict[str, float] = {}
        self.stage = "probes"
        self._started: float | None = None

    def enter(self, stage: str | None) -> None:
        """Start `stage` (None: the end); the previous stage's wall time goes to timings."""
        now = time.perf_counter()
        if self._started is not None:
            self.add(self.stage, now - self._started)
        self._started = now if stage else None
        if stage:
            self.stage = stage
            self.report("stage", stage=stage)

    def add(self, key: str, seconds: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + seconds


def load_artifact(task: Task, artifact: object, platform: str) -> Callable:
    """The candidate as a function with the contract's signature, built from its artifact.

    Raises:
        StageFailure: the artifact does not decode or fails verification.
    """
    names = set(task.per_element(lambda *args: None))
    try:
        blobs = decode(artifact, names)
        calls = load_variants(blobs, task.element_signature, platform)
    except ArtifactRejected as error:
        raise StageFailure(f"the exported program was refused: {error}") from error
    return task.assemble(calls)


def train_checked(task: Task, function: Callable, config: PPOConfig, seeds: list[int]) -> EnvRun:
    """Train `function` plugged into PPO; fail at the first non-finite or negative-drift update.

    Raises:
        StageFailure: training raised, or broke an invariant (the update and seed are named).
    """
    try:
        run = run_training(config, task.plug(function), seeds)
    except Exception as error:
        raise StageFailure(
            describe_exception(
                error, f"training on {config.env_name} ({config.total_timesteps} steps)"
            )
        ) from error
    if run.nonfinite_update is not None:
        raise StageFailure(
            f"training produced NaN/inf at update {run.nonfinite_update + 1} of "
            f"{config.num_updates} on {config.env_name} (seed {run.nonfinite_seed}): the "
            "loss, the parameters or the optimizer state stopped being finite"
        )
    if run.negative_drift_update is not None:
        raise StageFailure(
            f"the drift went negative during training ({run.min_drift:.4g}) at update "
            f"{run.negative_drift_update + 1} of {config.num_updates} on {config.env_name} "
            f"(seed {run.negative_drift_seed}); a drift must be >= 0 on every minibatch"
        )
    return run


def short_run_reason(score: EnvScore, threshold: float, baseline_name: str) -> str:
    """Why a candidate stops after the short run, with the numbers that decided it."""
    return (
        f"short run: normalised score {score.normalised:.3f} on {score.env} after "
        f"{score.total_timesteps} steps (mean return {score.mean:.4g}; random policy "
        f"{score.random_mean:.4g} = 0, baseline {baseline_name} {score.baseline_mean:.4g} = 1) "
        f"is below the threshold {threshold:g}"
    )


def _score(run: EnvRun, entry: PlannedRun, references: dict[str, dict]) -> EnvScore:
    reference = references[entry.config.config_hash()]
    return env_score(
        run.to_dict(),
        reference["baseline_mean"],
        reference["random_mean"],
        entry.heldout,
        entry.stage,
    )


def _train_and_score(
    task: Task,
    function: Callable,
    settings: CascadeSettings,
    references: dict[str, dict],
    clock: _StageClock,
    outcome: Outcome,
    warnings: list[str],
) -> None:
    """Stages 3 and 4 as planned from the settings (the same plan the parent scores)."""
    seeds = list(range(int(settings.seeds)))
    threshold = float(settings.short_run_threshold)
    reused = None
    for entry in plan_runs(settings):
        if entry.stage != clock.stage:
            clock.enter(entry.stage)
        if reused is not None and entry.stage == "full" and reused[0] == entry.config:
            reused[1].stage = "full"  # the short run was this very run
            continue
        run = train_checked(task, function, entry.config, seeds)
        clock.add("compile", run.compile_s)
        clock.add("run", run.run_s)
        score = _score(run, entry, references)
        outcome.env_scores.append(score)
        if entry.stage != "short":
            continue
        if score.normalised is None:
            warnings.append(
                f"short run: the normalised score on {score.env} is undefined (the "
                "baseline is no better than a random policy at this budget); not filtered"
            )
        elif score.normalised < threshold:
            raise StageFailure(short_run_reason(score, threshold, task.baseline_name))
        reused = (entry.config, score)
    full = [s for s in outcome.env_scores if s.stage == "full"]
    train_scores = [s.normalised for s in full if not s.heldout and s.normalised is not None]
    held_scores = [s.normalised for s in full if s.heldout and s.normalised is not None]
    outcome.fitness = aggregate(train_scores) if train_scores else None
    outcome.heldout = aggregate(held_scores) if held_scores else None


def evaluate_artifact(
    task: Task,
    artifact: object,
    settings: CascadeSettings,
    references: dict[str, dict],
    probe_seed: int,
    platform: str,
    report: Report = ignore,
) -> Outcome:
    """Stages 2-4 for one exported candidate; never executes candidate Python.

    Args:
        task: the task the artifact implements.
        artifact: the encoded artifact from `trace_candidate` (untrusted: verified here).
        settings: the cascade settings (suite, budgets, seeds, threshold).
        references: config hash -> {"baseline_mean", "random_mean"} for every planned run.
        probe_seed: seeds the trusted probes (the parent picks one the tracer never saw).
        platform: the JAX platform the artifact was exported for.
        report: receives `stage` and `fingerprint` events as they happen.

    Returns:
        The Outcome: passed at "full" with scores, or the stage that stopped it and why.
    """
    outcome = Outcome(passed=False, stage="probes")
    clock = _StageClock(report)
    warnings: list[str] = []
    try:
        clock.enter("probes")
        start = time.perf_counter()
        function = load_artifact(task, artifact, platform)
        clock.add("load_artifact", time.perf_counter() - start)
        if task.probes is not None:
            probed = task.probes(function, int(probe_seed))
            if not probed.ok:
                raise StageFailure(f"the exported program failed the probes: {probed.reason}")
        if task.fingerprint_inputs is not None:
            try:
                outcome.fingerprint = fingerprint(function, task.fingerprint_inputs())
            except Exception as error:  # ProbeFailure and the like
                raise StageFailure(str(error)) from error
            report("fingerprint", fingerprint=outcome.fingerprint)
        _train_and_score(task, function, settings, references, clock, outcome, warnings)
        outcome.passed = True
        outcome.stage = "full"
    except StageFailure as failure:
        outcome.stage, outcome.reason = clock.stage, failure.reason
    except MemoryError:
        outcome.stage = clock.stage
        outcome.reason = (
            f"ran out of memory in stage {clock.stage} (MemoryError); keep intermediate "
            "arrays the size of the inputs"
        )
    except Exception as error:  # anything the stage wrappers did not anticipate
        outcome.stage = clock.stage
        outcome.reason = describe_exception(error, f"running stage {clock.stage}")
    clock.enter(None)
    outcome.warnings = warnings
    outcome.timings = clock.timings
    return outcome


def train_baselines(
    task: Task,
    settings: CascadeSettings,
    config_hashes: list[str],
    platform: str,
    report: Report = ignore,
) -> BaselineRuns:
    """The task's baseline program on the requested configs, and each env's random return.

    The baseline is the task's baseline seed program (trusted source) exported and loaded
    exactly as a candidate's is, so a candidate identical to it scores exactly 1.0.

    Args:
        task: the task whose baseline program is trained.
        settings: the cascade settings whose plan holds the configs.
        config_hashes: which planned configs to train.
        platform: the JAX platform to export for.
        report: receives `stage` events.

    Returns:
        The runs and the random-policy return of every env they cover.

    Raises:
        StageFailure: the baseline program broke an invariant (a bug, not a candidate's fault).
    """
    clock = _StageClock(report)
    per_element = task.per_element(
        load_function(task.baseline_program().source, task.function_name)
    )
    blobs = export_variants(per_element, task.element_signature, platform)
    function = task.assemble(load_variants(blobs, task.element_signature, platform))
    seeds = list(range(int(settings.seeds)))
    wanted = set(config_hashes)
    clock.enter("full")
    runs, randoms = [], {}
    for entry in plan_runs(settings):
        key = entry.config.config_hash()
        if key not in wanted:
            continue
        wanted.discard(key)
        run = train_checked(task, function, entry.config, seeds)
        clock.add("compile", run.compile_s)
        clock.add("run", run.run_s)
        runs.append({"config_hash": key, **run.to_dict()})
        if entry.config.env_name not in randoms:
            start = time.perf_counter()
            randoms[entry.config.env_name] = random_policy_return(entry.config.env_name)
            clock.add("random_return", time.perf_counter() - start)
    clock.enter(None)
    return BaselineRuns(runs=runs, random=randoms, timings=clock.timings)


def introspect() -> dict:
    """What the sandbox looks like from inside (a trusted diagnostic job, used by tests)."""
    try:
        connection = socket.create_connection(("1.1.1.1", 53), timeout=2)
        connection.close()
        network = "connected"
    except OSError as error:
        network = f"{type(error).__name__}: {error}"
    limits = {}
    for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE"):
        limits[name] = list(resource.getrlimit(getattr(resource, name)))
    environs = {}
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environs[pid] = handle.read().decode("utf-8", "replace")
        except OSError as error:
            environs[pid] = f"unreadable: {error}"
    return {
        "env": sorted(os.environ),
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "connect": network,
        "rlimits": limits,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "uid": os.getuid(),
        "visible_pids": pids,
        "environs": environs,
        "root": sorted(os.listdir("/")),
        "etc": sorted(os.listdir("/etc")) if os.path.isdir("/etc") else [],
    }
