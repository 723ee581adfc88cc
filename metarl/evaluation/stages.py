"""The cascade's sandboxed stages as plain functions: trace, probe and train, in-process.

Each takes typed settings and a `report(event, **data)` callback, so tests call them directly
and the sandbox worker (evaluation/worker.py) only wires them to its result channel:

- `trace_candidate` and `sample_candidate` (evaluation/tracing.py, re-exported here): the only
  functions that run candidate Python, in the sandboxed *tracer*; the parent treats what they
  return as untrusted data.
- `evaluate_artifact`: stages 2-4 on an exported candidate, trusted code only: verifies the
  artifact, probes it again on inputs the tracer never saw, fingerprints it, and trains and
  scores it with the parent's references. Runs in the *trainer*.
- `train_baselines`: the task's baseline program on the requested configs, and each env's
  random return, for the parent's cache. Runs in a trainer that never sees a candidate.
"""

from __future__ import annotations

import math
import os
import resource
import socket
import time
from dataclasses import dataclass
from typing import Callable

from metarl.evaluation.fidelity import rung_reason
from metarl.evaluation.near_duplicates import BehaviourIndex, behaviour_descriptor, near_reason
from metarl.evaluation.outcome import EnvScore, Outcome, env_score
from metarl.evaluation.preflight import compile_group
from metarl.evaluation.roles import score_roles
from metarl.evaluation.settings import CascadeSettings, PlannedRun, plan_runs
from metarl.evaluation.tracing import (  # the tracer's half; re-exported for older callers
    StageFailure,
    TraceResult,
    load_candidate,
    sample_candidate,
    trace_candidate,
)
from metarl.rl.configs import PPOConfig
from metarl.rl.training import BatchProgram, EnvRun, program_key, random_policy_return
from metarl.rl.verifier.artifact import (
    ArtifactRejected,
    callables,
    decode,
    export_variants,
    load_exported,
    load_variants,
)
from metarl.rl.verifier.behaviour import BehaviourRejected
from metarl.tasks import Task
from metarl.tasks.behaviour import check_artifact
from metarl.tasks.candidate import load_function
from metarl.tasks.probing import describe_exception, fingerprint_outputs, probe_outputs

Report = Callable[..., None]  # report(event, **data): progress for the parent


def ignore(event: str, **data) -> None:
    """A `report` that drops every event (in-process use without a listener)."""


@dataclass
class BaselineRuns:
    """The baseline program's runs (EnvRun dicts keyed by config hash) and random returns."""

    runs: list[dict]
    random: dict[str, float]
    timings: dict[str, float]

    def to_dict(self) -> dict:
        return {"runs": self.runs, "random": self.random, "timings": self.timings}


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


def _seed_position(index: int | None, run: EnvRun) -> str:
    """`training seed 2 of 4`: a seed named by its position in the batch, never by its value
    (the values are the run pool's secret; a reason reaches the archive, the terminal and the
    proposer's next prompt)."""
    where = "?" if index is None else str(index + 1)
    return f"training seed {where} of {len(run.seeds)}"


def check_run(run: EnvRun, config: PPOConfig) -> None:
    """Fail the candidate at the first non-finite or negative-drift update of `run`.

    Raises:
        StageFailure: the run broke an invariant (the update and seed are named).
    """
    if run.nonfinite_update is not None:
        seed = _seed_position(run.nonfinite_seed_index, run)
        raise StageFailure(
            f"training produced NaN/inf at update {run.nonfinite_update + 1} of "
            f"{config.num_updates} on {config.env_name} ({seed}): the loss, the parameters or the "
            "optimizer state stopped being finite"
        )
    if run.negative_drift_update is not None:
        raise StageFailure(
            f"the drift went negative during training ({run.min_drift:.4g}) at update "
            f"{run.negative_drift_update + 1} of {config.num_updates} on {config.env_name} "
            f"({_seed_position(run.negative_drift_seed_index, run)}); a drift must be >= 0 on "
            "every minibatch"
        )


def short_run_reason(score: EnvScore, threshold: float, baseline_name: str) -> str:
    """Why a candidate stops after the short run, with the numbers that decided it."""
    return (
        f"short run: normalised score {score.normalised:.3f} on {score.env} after "
        f"{score.total_timesteps} steps (mean return {score.mean:.4g}; random policy "
        f"{score.random_mean:.4g} = 0, baseline {baseline_name} {score.baseline_mean:.4g} = 1) "
        f"is below the threshold {threshold:g}"
    )


def _score(run: EnvRun, entry: PlannedRun, references: dict[str, dict]) -> EnvScore:
    reference = references[entry.key]
    return env_score(
        run.to_dict(),
        reference["baseline_mean"],
        reference["random_mean"],
        entry.role,
        entry.stage,
        lr=entry.config.lr if entry.sweep else None,
    )


def _advance(program, runner, slot: int, stop: int, sweep: tuple[float, ...]):
    """Advance a candidate's runner to `stop`: its runs by learning rate (one, unswept)."""
    if not sweep:
        runner, run = program.advance(runner, slot, stop)
        return runner, {program.config.lr: run}
    runner, runs = program.advance_sweep(runner, slot, stop)
    return runner, dict(zip(sweep, runs))


def group_by_config(plan: list[PlannedRun]) -> list[list[PlannedRun]]:
    """The plan's segments grouped by run (same config; a sweep's rates together), in order:
    each group is one program."""
    groups: list[list[PlannedRun]] = []
    for entry in plan:
        if groups and groups[-1][0].program == entry.program:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


@dataclass
class _Candidate:
    """A candidate in the trainer: its position in the batch, function and outcome so far."""

    index: int
    function: Callable
    outcome: Outcome
    artifact: object = None  # the encoded artifact it was loaded from (for the pre-flight)


def _add(timings: dict[str, float], key: str, seconds: float) -> None:
    timings[key] = timings.get(key, 0.0) + seconds


def _prepare(
    task: Task,
    index: int,
    artifact: object,
    probe_seed: int,
    platform: str,
    known_fingerprints: dict[str, str],
    report: Report,
    *,
    settings: CascadeSettings,
    known_behaviours: BehaviourIndex | None = None,
) -> _Candidate | Outcome:
    """Stage 2 on one artifact: verify, probe, check per-sample behaviour at the training
    sizes, fingerprint; an Outcome when it stops here (a duplicate of a known candidate: the
    same fingerprint, or a behaviour descriptor within `settings.behaviour_novelty` of one in
    `known_behaviours`).

    The function returned for training is built from the very programs the probes and the
    behavioural check (tasks/behaviour.py) ran: the trained function is the probed function.
    `settings` give the configs and seeds whose training program the call sizes are read from.
    """
    outcome = Outcome(passed=False, stage="probes")
    start = time.perf_counter()
    try:
        report("stage", index=index, stage="probes")
        names = set(task.per_element(lambda *args: None))
        try:
            variants = load_exported(decode(artifact, names), task.element_signature, platform)
        except ArtifactRejected as error:
            raise StageFailure(f"the exported program was refused: {error}") from error
        function = task.assemble(callables(variants, task.element_signature))
        outcome.timings["load_artifact"] = time.perf_counter() - start
        if task.probes is not None:
            probed = task.probes(function, int(probe_seed))
            if not probed.ok:
                raise StageFailure(f"the exported program failed the probes: {probed.reason}")
        checked = time.perf_counter()
        configs = [entry.config for entry in plan_runs(settings)]
        try:
            check_artifact(task, variants, configs, settings.training_seeds(), int(probe_seed))
        except BehaviourRejected as error:
            raise StageFailure(f"the exported program was refused: {error}") from error
        outcome.timings["behaviour"] = time.perf_counter() - checked
        if task.fingerprint_inputs is not None:
            try:
                outputs = probe_outputs(function, task.fingerprint_inputs())
                outcome.fingerprint = fingerprint_outputs(outputs)
                outcome.behaviour = behaviour_descriptor(outputs)
            except Exception as error:  # ProbeFailure and the like
                raise StageFailure(str(error)) from error
            report("fingerprint", index=index, fingerprint=outcome.fingerprint)
            if outcome.fingerprint in known_fingerprints:
                outcome.duplicate_of = known_fingerprints[outcome.fingerprint]
                raise StageFailure(f"behaves identically to candidate {outcome.duplicate_of}")
            threshold = float(settings.behaviour_novelty)
            near = known_behaviours.nearest(outcome.behaviour) if known_behaviours else None
            if threshold > 0 and near is not None and near[1] <= threshold:
                outcome.duplicate_of = near[0]
                raise StageFailure(near_reason(near[0], near[1], threshold))
    except StageFailure as failure:
        outcome.reason = failure.reason
    except MemoryError:
        outcome.reason = (
            "ran out of memory in stage probes (MemoryError); keep intermediate arrays the "
            "size of the inputs"
        )
    except Exception as error:  # anything the stage wrappers did not anticipate
        outcome.reason = describe_exception(error, "running stage probes")
    outcome.timings["probes"] = (
        time.perf_counter()
        - start
        - outcome.timings.get("load_artifact", 0.0)
        - outcome.timings.get("behaviour", 0.0)
    )
    if outcome.reason is not None:
        return outcome
    return _Candidate(index, function, outcome)


def _train_group(
    task: Task,
    group: list[PlannedRun],
    alive: list[_Candidate],
    settings: CascadeSettings,
    references: dict[str, dict],
    report: Report,
    platform: str = "cpu",
    isolate: bool = False,
    programs_by_key: dict | None = None,
) -> list[_Candidate]:
    """Train every live candidate through one run's segments with one compiled program (with
    `isolate`, one each) after its pre-flight (preflight.py), between `active` events; a run
    on another member of an env family already compiled for reuses that program
    (`programs_by_key`, see preflight.compile_group).

    Returns:
        The candidates still alive afterwards; the others' outcomes say why they stopped.
    """
    seeds = settings.training_seeds()
    threshold = float(settings.short_run_threshold)
    config, sweep = group[0].config, group[0].sweep
    stage = group[0].stage
    compiled = compile_group(
        task, config, alive, seeds, platform, isolate, report, stage, sweep, programs_by_key
    )
    survivors = []
    for position, candidate in enumerate(alive):
        outcome = candidate.outcome
        compile_share = compiled.compile_s[position]
        _add(outcome.timings, "compile", compile_share)
        if position in compiled.failures:  # broke the pre-flight or its own compile
            outcome.stage, outcome.reason = stage, compiled.failures[position]
            continue
        program, slot = compiled.programs[position]
        report("active", index=candidate.index, stage=stage)
        try:
            runner, done, swept = program.start(slot), 0, {}
            for entry in group:
                if entry.updates == done and not sweep:  # the short run was the whole run
                    outcome.env_scores[-1].stage = "full"
                    continue
                outcome.stage = entry.stage
                if entry.updates != done or not swept:
                    report("stage", index=candidate.index, stage=entry.stage)
                    runner, runs = _advance(program, runner, slot, entry.updates, sweep)
                    done, swept = entry.updates, runs
                    _add(outcome.timings, "run", runs[entry.config.lr].run_s)
                    _add(outcome.timings, entry.stage, runs[entry.config.lr].run_s)
                run = swept[entry.config.lr]
                run.compile_s = compile_share
                check_run(run, entry.config)
                score = _score(run, entry, references)
                outcome.env_scores.append(score)
                if entry.rung is not None:
                    baseline = references[entry.key].get("baseline_returns")
                    reason = baseline and rung_reason(
                        score.env,
                        score.total_timesteps,
                        entry.rung,
                        score.returns,
                        baseline,
                        references[entry.key]["random_mean"],
                        settings.rung_bar,
                        settings.rung_confidence,
                        task.baseline_name,
                    )
                    if reason:
                        raise StageFailure(reason)
                elif entry.stage == "short":
                    if score.normalised is None:
                        why = (
                            "the baseline is no better than a random policy at this budget"
                            if math.isfinite(score.mean)
                            else "a seed ended no episode in the scored window"
                        )
                        outcome.warnings.append(
                            f"short run: the normalised score on {score.env} is undefined "
                            f"({why}); not filtered"
                        )
                    elif score.normalised < threshold:
                        raise StageFailure(short_run_reason(score, threshold, task.baseline_name))
            survivors.append(candidate)
        except StageFailure as failure:
            outcome.reason = failure.reason
        except MemoryError:
            outcome.reason = (
                f"ran out of memory in stage {outcome.stage} (MemoryError); keep intermediate "
                "arrays the size of the inputs"
            )
        except Exception as error:  # a runtime error of this candidate's program
            outcome.reason = describe_exception(
                error, f"training on {config.env_name} ({config.total_timesteps} steps)"
            )
        finally:
            report("active", index=None)
    return survivors


def evaluate_artifacts(
    task: Task,
    artifacts: list[object],
    settings: CascadeSettings,
    references: dict[str, dict],
    probe_seeds: list[int],
    platform: str,
    known_fingerprints: dict[str, str] | None = None,
    report: Report = ignore,
    isolate: bool = False,
    known_behaviours: dict[str, list] | None = None,
    train: bool = True,
) -> list[Outcome]:
    """Stages 2-4 for a batch of exported candidates; never executes candidate Python.

    Each artifact is verified, probed and fingerprinted on its own (a bad one stops alone);
    the rest are trained together: one compiled program per planned run (environment), in
    which a candidate index selects the candidate (rl/training.py's BatchProgram). The short
    run is the first segment of the first env's run; the candidates below the threshold stop
    there and the others continue.

    Args:
        task: the task the artifacts implement.
        artifacts: encoded artifacts from `trace_candidate` (untrusted: verified here).
        settings: the cascade settings (suite, budgets, seeds, threshold).
        references: PlannedRun.key -> {"baseline_mean", "random_mean"} for every segment.
        probe_seeds: one per artifact; seeds the trusted probes (inputs the tracer never saw).
        platform: the JAX platform the artifacts were exported for.
        known_fingerprints: fingerprint -> candidate id; a candidate behaving like one of them
            stops after the probes as its duplicate.
        known_behaviours: candidate id -> behaviour descriptor; a candidate within
            `settings.behaviour_novelty` of one of them stops there too, as its near-duplicate.
        report: receives `stage`, `fingerprint` and `active` events (preflight.py), each with
            a candidate's `index` (`active`: whose programs run from now on, or None).
        isolate: compile each candidate's training program alone.
        train: False: probed, not trained (the baseline program: the parent scores it).

    Returns:
        One Outcome per artifact, in order.
    """
    known = known_fingerprints or {}
    behaviours = BehaviourIndex(known_behaviours) if settings.behaviour_novelty > 0 else None
    outcomes: list[Outcome] = []
    alive: list[_Candidate] = []
    for index, (artifact, probe_seed) in enumerate(zip(artifacts, probe_seeds)):
        report("active", index=index, stage="probes")
        try:
            prepared = _prepare(
                task,
                index,
                artifact,
                probe_seed,
                platform,
                known,
                report,
                settings=settings,
                known_behaviours=behaviours,
            )
        finally:
            report("active", index=None)
        if isinstance(prepared, Outcome):
            outcomes.append(prepared)
        else:
            prepared.artifact = artifact
            outcomes.append(prepared.outcome)
            alive.append(prepared)
    if not train:  # passed at stage "probes": scored from the baseline's runs by the parent
        for candidate in alive:
            candidate.outcome.passed, candidate.outcome.fault = True, None
        return outcomes
    programs_by_key: dict = {}  # one program per env family, config and layout
    for group in group_by_config(plan_runs(settings)):
        if not alive:
            break
        alive = _train_group(
            task, group, alive, settings, references, report, platform, isolate, programs_by_key
        )
    for candidate in alive:
        outcome = candidate.outcome
        outcome.passed, outcome.stage, outcome.fault = True, "full", None
        score_roles(outcome, settings.lr_aggregation)
    return outcomes


def evaluate_artifact(
    task: Task,
    artifact: object,
    settings: CascadeSettings,
    references: dict[str, dict],
    probe_seed: int,
    platform: str,
    report: Report = ignore,
) -> Outcome:
    """Stages 2-4 for one exported candidate: the batch of one of `evaluate_artifacts`."""
    return evaluate_artifacts(
        task, [artifact], settings, references, [probe_seed], platform, report=report
    )[0]


def train_baselines(
    task: Task,
    settings: CascadeSettings,
    keys: list[str],
    platform: str,
    report: Report = ignore,
) -> BaselineRuns:
    """The task's baseline program on the requested segments, and each env's random return,
    on the settings' training seeds, summarised per seed (the parent caches per seed).

    The baseline is the task's baseline seed program (trusted source) exported, loaded and
    trained exactly as a candidate's is (the same segments of the same kind of program), so a
    candidate identical to it scores exactly 1.0.

    Args:
        task: the task whose baseline program is trained.
        settings: the cascade settings whose plan holds the segments.
        keys: which planned segments (PlannedRun.key) to train.
        platform: the JAX platform to export for.
        report: receives `stage` events.

    Returns:
        The runs (one per segment and seed, each with its `key` and `seed`) and the
        random-policy return of every env they cover.

    Raises:
        StageFailure: the baseline program broke an invariant (a bug, not a candidate's fault).
    """
    clock = _StageClock(report)
    per_element = task.per_element(
        load_function(task.baseline_program().source, task.function_name)
    )
    blobs = export_variants(per_element, task.element_signature, platform)
    function = task.assemble(load_variants(blobs, task.element_signature, platform))
    seeds = settings.training_seeds()
    wanted = set(keys)
    clock.enter("full")
    runs, randoms, programs = [], {}, {}
    for group in group_by_config(plan_runs(settings)):
        if not wanted.intersection(entry.key for entry in group):
            continue
        config, sweep = group[0].config, group[0].sweep
        key = (program_key(config), tuple(sweep))  # a family's levels share one program
        if key not in programs:
            programs[key] = BatchProgram(
                config, lambda i: task.select([function], i), 1, seeds, tuple(sweep) or None
            )
            clock.add("compile", programs[key].compile_s)
        program = programs[key].on(config)
        runner, done, per_rate = program.start(0), None, {}
        for entry in group:
            if entry.key not in wanted:
                continue
            wanted.discard(entry.key)
            if entry.updates != done:  # one advance per segment end; a sweep's rates share it
                if sweep:
                    runner, table = program.advance_sweep_per_seed(runner, 0, entry.updates)
                    per_rate = dict(zip(sweep, table))
                else:
                    runner, per_seed = program.advance_per_seed(runner, 0, entry.updates)
                    per_rate = {config.lr: per_seed}
                done = entry.updates
                clock.add("run", next(iter(per_rate.values()))[0].run_s)
            for seed, run in zip(seeds, per_rate[entry.config.lr]):
                run.compile_s = program.compile_s
                check_run(run, entry.config)
                runs.append({"key": entry.key, "seed": seed, **run.to_dict()})
        if config.env_name not in randoms:
            start = time.perf_counter()
            randoms[config.env_name] = random_policy_return(config.env_name)
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


__all__ = [
    "BaselineRuns",
    "StageFailure",
    "TraceResult",
    "evaluate_artifact",
    "evaluate_artifacts",
    "introspect",
    "load_artifact",
    "load_candidate",
    "sample_candidate",
    "trace_candidate",
    "train_baselines",
]
