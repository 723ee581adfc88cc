"""The evaluation cascade: the one entry point that scores untrusted candidate source.

    static (parent, ast only) -> probes -> short run -> full run   (sandboxed worker process)

Each stage passes or stops the candidate with one clear reason, written for the LLM to read:

1. **static** (metarl.evaluation.static_check): parses; defines exactly the contracted function
   with the contracted parameters; only jax/jnp/lax/nn/math; no dunders, I/O, exec/eval, global
   state, module patching; at most 20 KB. Runs here, in the parent, and never executes code.
2. **probes** (the task's probes.py): on fresh random inputs (a new seed per evaluation unless
   `probe_seed` is set) the function jit-compiles, vmaps, returns exactly the right shape and
   dtype, finite values and gradients, and meets the task's invariants. The candidate's
   behaviour fingerprint (a hash of its outputs, rounded to 4 significant digits, on the task's
   fixed probe batch) is taken here; when it matches one in `known_fingerprints` the evaluation
   stops as a duplicate; so does one whose behaviour descriptor (near_duplicates.py) is within
   `behaviour_novelty` of one in `known_behaviours` (a near-duplicate).
3. **short run**: the first segment of the first training environment's full run, up to the
   short budget (`short_timesteps`, default the suite's `short_budget`, never more than the full
   budget), all seeds, the learning rate annealed over the whole run. The candidate stops here
   when its normalised score there (against the baseline's same segment) is below
   `short_run_threshold` (default 0.25: a quarter of the way from a random policy to the task's
   baseline seed). When the baseline is no better than random at that point the score is
   undefined and the candidate is not filtered (a warning says so). When the short budget is
   the whole run, the short run *is* the full run on that environment. With `rungs`
   (discovery's children: fidelity.py) each training run is also cut at its rungs, where a
   candidate clearly below half the baseline's progress on the same seeds stops.
4. **full run**: the rest of that run (the same compiled program continues it), then every
   other training environment of the suite (and, with `heldout`, the held-out ones), all
   seeds, full budget. Fitness = mean normalised score over the training environments
   (scoring.aggregate), with a bootstrap 95% interval over seeds; `heldout` = the same over
   held-out environments.

**Batches.** `evaluate_batch` takes many sources: stages 1-2 run per candidate (the tracers
`workers` at a time), then the survivors are trained by one trainer, one compiled program per
environment with a candidate index selecting the candidate (rl/training.py's BatchProgram), so a
generation pays each environment's compile once. A candidate's numbers are the same in any
batch (each is its own call of the program). One candidate cannot take its batch down with it
(evaluation/batch_training.py): each is pre-flighted alone at the training shapes before the
shared compile (evaluation/preflight.py), runs on its own clock (the trainer is stopped when one
candidate's programs run past that candidate's own limit), and a trainer that dies is blamed on
the candidate whose programs were running, once it fails alone; the others are trained again
without it and score as they would alone. Only what is reproducible without any candidate is an
*evaluator fault* (`Outcome.evaluator_fault`). Where the executor (executors.py) has several
slots (one per pinned GPU, or Ray tasks on a cluster), the survivors are split into that many
shares, trained at once; the task's own baseline program is probed, not trained (its scores
are the baseline's runs, bit for bit), and a lone candidate's envs train in groups
(batch_training.py `train_batch`, env_shares.py).

Normalised score per environment = (R - R_random) / (R_baseline - R_random), where R is the mean
over seeds of the final return, R_random the uniform random policy's return and R_baseline the
task's baseline program (PPO clip / Adam) trained with the same config and seeds. Baselines and
random returns are trained in trainer workers that never load a candidate, and cached on disk by
this process (METARL_CACHE_DIR, evaluation/baseline_cache.py). NaN/inf in the loss, parameters or
optimizer state, or a negative drift on any minibatch, fails the stage, naming update and seed.

**Who runs what.** This process never executes candidate code. The sandboxed halves of stages
2-4 are plain functions (evaluation/stages.py: `trace_candidate`, `evaluate_artifact`,
`train_baselines`) that tests call in-process; here they run in disposable sandboxed
workers (evaluation/sandbox.py, bubblewrap): the *tracer* runs the candidate's Python, its
probes and `jax.export` (limit `trace_timeout_s`, 60 s: a Python or trace-time infinite loop
stops there), and sends back an artifact (or, for `Evaluator.sample`, a drift candidate's
values and slopes on the distillation grid: tracing.sample_candidate, under the same limit); the
*trainer*, which never runs candidate Python,
verifies the artifact (rl/verifier/artifact.py), probes it again on inputs the tracer never saw,
fingerprints it and trains it (stages 3-4; limit scaled from the baseline's measured time for the
same work, `train_timeout_factor` x, at least `train_timeout_floor_s`, at most `timeout_s`).
Every message from either is validated in this process (a tracer's in tracer_results.py); the
scores are recomputed here from the raw returns and this process's own baselines, so the verdict
never depends on a number computed in a process that shared anything with the candidate.
Candidate text (reasons, output) is cleaned (evaluation/text.py) before it reaches a terminal,
the archive or a prompt.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from metarl import platform
from metarl.evaluation import baseline_cache
from metarl.evaluation.artifact_precheck import precheck
from metarl.evaluation.batch_training import BatchTraining, OnEvent, verify_outcome
from metarl.evaluation.executors import ExecutorSettings, make_executor
from metarl.evaluation.near_duplicates import KnownPrograms
from metarl.evaluation.outcome import Outcome
from metarl.evaluation.references import baseline_reference
from metarl.evaluation.sandbox import WorkerResult, limits_dict
from metarl.evaluation.seeds import SeedSource, TrainingSeeds
from metarl.evaluation.settings import CascadeSettings, PlannedRun, Reference, plan_runs, validate
from metarl.evaluation.static_check import check_task_source
from metarl.evaluation.text import clean
from metarl.evaluation.tracer_results import SampleFailure, read_samples, read_trace
from metarl.rl.lpo import DriftSamples, drift_grid
from metarl.rl.training import EnvRun
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash

logger = logging.getLogger(__name__)
__all__ = ["Evaluator", "SampleFailure", "evaluate_source", "verify_outcome"]  # the public API

MAX_SAMPLE_POINTS = 512  # 512^2 values and slopes: ~12 MB of JSON, under the channel's 16 MB


def _resolve_task(task):

    return get_task(task) if isinstance(task, str) else task


def baseline_shares(plan: Sequence[PlannedRun], slots: int) -> list[list[str]]:
    """The planned segments' keys in at most `slots` shares of whole envs (an env's segments
    are one run: they stay together), the costliest envs (most updates) spread first.

    Args:
        plan: the planned segments.
        slots: trainer jobs that may run at once.

    Returns:
        Non-empty lists of keys; one list when `slots` is 1 or there is one env.
    """
    by_env: dict[str, set[str]] = {}
    cost: dict[str, int] = {}
    for entry in plan:
        env = entry.config.env_name
        by_env.setdefault(env, set()).add(entry.key)
        cost[env] = max(cost.get(env, 0), int(entry.config.num_updates))
    shares: list[list[str]] = [[] for _ in range(max(1, min(int(slots), len(by_env))))]
    loads = [0] * len(shares)
    for env in sorted(by_env, key=lambda e: (-cost[e], e)):
        lightest = loads.index(min(loads))
        shares[lightest] += sorted(by_env[env])
        loads[lightest] += cost[env]
    return [share for share in shares if share]


class Evaluator:
    """Runs the cascade on sandboxed workers started by an executor; `evaluate` is thread-safe.

    `workers` is the number of worker jobs that may run at once and, on this machine, the
    number of pre-warmed spare workers of each role kept ready (with `prewarm=False`, on
    demand). `executor` says where workers run (executors.py): this machine, optionally one
    device each, or a Ray cluster; a batch's training is split into the executor's `slots`
    shares, trained at once (a candidate's numbers do not depend on its batch).

    Raises:
        SandboxUnavailable: when bubblewrap cannot run here and `unsafe_no_sandbox` is off.
        ExecutorError: the ray executor without Ray or a reachable cluster.
    """

    def __init__(
        self,
        settings: CascadeSettings,
        workers: int = 1,
        prewarm: bool = True,
        executor: ExecutorSettings | None = None,
    ):
        validate(settings)
        if settings.unsafe_no_sandbox:
            logger.warning(
                "unsafe_no_sandbox: candidate code runs WITHOUT bubblewrap; it can read this "
                "machine's files and environment"
            )
        self.settings = settings
        self.platform = platform.backend()
        self._executor = make_executor(
            executor or ExecutorSettings(), settings.limits(), max(1, int(workers)), prewarm
        )
        self.workers = max(1, int(workers), self._executor.slots)
        self._slots = threading.BoundedSemaphore(self.workers)
        # the batches' training seeds: pinned, or drawn from a secret pool (evaluation/seeds.py)
        self.seeds = SeedSource(settings.seeds, settings.seed_values, settings.seed_pool)
        # (task, segment key, seed) -> the baseline's run on that seed; env -> random return
        # (task, segment key, the batch's seeds in order, seed) -> that seed's baseline run
        self._baseline_runs: dict[tuple[str, str, tuple[int, ...], int], dict] = {}
        self._randoms: dict[str, float] = {}
        self._references_lock = threading.Lock()
        self.closing = False  # set by close: a batch cut short by it did not fail
        self._batches = BatchTraining(
            settings, self.platform, self._run_trainer, self._batch_settings
        )

    # -- context manager ------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers; a batch still running ends with the evaluator's fault, logged
        as stopped, not as a failure (Ctrl-C ends a run with one line, not a traceback)."""
        self.closing = True
        self._executor.close()

    # -- references (baselines, random returns) -------------------------------------------------
    def references(self, task, seeds: Sequence[int] | None = None) -> dict[str, Reference]:
        """PlannedRun.key -> Reference for every planned segment on training seeds `seeds`
        (default: a fresh draw); trains the baseline on them when this layout is new.

        Baselines are kept per (segment, the batch's seeds in order, seed): in memory here and
        on disk in the baseline cache. Per layout, not per seed, because a seed's returns
        depend on how many seeds its program is vmapped over and at which position: measured
        on classic's CartPole at 1e5 steps, seed 11 returned 269.42 alone and 293.19 beside
        seed 22 (equal at 16384 steps: ulp differences that training amplifies). The
        candidates of a batch train on exactly these seeds in this order, so their baseline is
        the same computation and the baseline program scores exactly 1.0 against itself.

        Raises:
            RuntimeError: the baseline program could not be trained (an evaluator fault).
        """
        task_obj = _resolve_task(task)
        plan = plan_runs(self.settings)
        values = [int(s) for s in seeds] if seeds is not None else self.seeds.draw().as_list()
        program = source_hash(task_obj.baseline_program().source)
        layout = tuple(values)
        with self._references_lock:
            missing = False
            for entry in plan:
                env = entry.config.env_name
                if env not in self._randoms:
                    random = baseline_cache.load(baseline_cache.random_key(env))
                    if random is not None:
                        self._randoms[env] = float(random["return"])
                for seed in values:
                    slot = (task_obj.name, entry.key, layout, seed)
                    if slot in self._baseline_runs:
                        continue
                    key = _baseline_key(task_obj, program, entry, seed, layout)
                    run = baseline_cache.load(key)
                    if run is None:
                        missing = True
                    else:
                        self._baseline_runs[slot] = run
                missing = missing or env not in self._randoms
            if missing:
                self._train_baselines(task_obj, plan, list(values), program)
            return {
                entry.key: baseline_reference(
                    [self._baseline_runs[(task_obj.name, entry.key, layout, s)] for s in values],
                    self._randoms[entry.config.env_name],
                )
                for entry in plan
            }

    def _train_baselines(self, task, plan, seeds: list[int], program: str) -> None:
        """Train the baseline program on every planned segment for `seeds` (a batch's seeds,
        in its order), in trainers that never see a candidate (one per executor slot, each a
        share of the envs: on 2 CPU cores with `trainers=2`, two at once); cache each
        (segment, layout, seed) run and each random return."""
        shares = baseline_shares(plan, self._executor.slots)
        if len(shares) == 1:
            self._train_baseline_keys(task, plan, seeds, program, shares[0])
            return
        with ThreadPoolExecutor(len(shares), thread_name_prefix="metarl-baseline") as pool:
            work = [
                pool.submit(self._train_baseline_keys, task, plan, seeds, program, keys)
                for keys in shares
            ]
            for future in work:
                future.result()

    def _train_baseline_keys(self, task, plan, seeds: list[int], program: str, keys) -> None:
        """One baseline trainer job: the planned segments `keys` (whole envs)."""
        settings = self._batch_settings(seeds)
        keys = sorted(keys)
        job = {
            "kind": "baseline",
            "task": task.name,
            "settings": settings.job_settings(),
            "keys": keys,
            "platform": self.platform,
        }
        segments = [entry for entry in plan if entry.key in keys]
        limit = self.settings.baseline_limit(segments, len(seeds))
        with self._slots:
            run = self._executor.run("trainer", job, limit)
        payload = (run.result or {}).get("payload") if run.status == "ok" else None
        if not isinstance(payload, dict) or run.result.get("kind") != "baseline":
            detail = run.reason or (payload or {}).get("error")
            raise RuntimeError(f"computing the {task.name} baseline failed: {clean(detail, 2000)}")
        by_key = {entry.key: entry for entry in segments}
        for data in payload.get("runs", []):
            entry = by_key[data.pop("key")]
            seed = int(data.pop("seed"))
            random_return = float(payload["random"][entry.config.env_name])
            for derived in ("mean", "std", "steps_per_s"):
                data.pop(derived, None)
            if data.get("nonfinite_update") is not None:
                raise RuntimeError(f"the {task.name} baseline diverged on {entry.config.env_name}")
            if data.get("seeds") != [seed]:
                raise RuntimeError(
                    f"the {task.name} baseline run of training seed {seeds.index(seed) + 1} of "
                    f"{len(seeds)} is malformed"
                )
            baseline_cache.save(_baseline_key(task, program, entry, seed, tuple(seeds)), data)
            baseline_cache.save(
                baseline_cache.random_key(entry.config.env_name),
                {"env": entry.config.env_name, "return": random_return},
            )
            self._baseline_runs[(task.name, entry.key, tuple(seeds), seed)] = data
            self._randoms[entry.config.env_name] = random_return

    def baseline(self, task: str, seeds: Sequence[int] | None = None) -> dict:
        """The task's baseline program on every env of the suite (cached) on `seeds` (default:
        a fresh draw): env -> EnvRun."""
        references = self.references(task, seeds)
        runs = {}
        for entry in plan_runs(self.settings):
            if entry.stage == "full":
                reference = references[entry.key]
                run = EnvRun.from_dict(reference.run)
                run.extra["random_mean"] = reference.random_mean
                runs[entry.config.env_name] = run
        return runs

    def _batch_settings(self, seeds: Sequence[int]) -> CascadeSettings:
        """The settings a batch's jobs carry: these training seeds, no pool."""
        values = [int(s) for s in seeds]
        return replace(self.settings, seeds=len(values), seed_values=values, seed_pool=None)

    # -- the cascade -----------------------------------------------------------------------------
    def evaluate(
        self,
        source: str,
        task: str,
        known_fingerprints: dict[str, str] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> Outcome:
        """Run the cascade on `source` for `task`: the batch of one of `evaluate_batch`.

        `progress(stage)` is called as each stage starts ("static", "probes", "short", "full").
        """
        report = (lambda index, stage: progress(stage)) if progress else None
        return self.evaluate_batch([source], task, known_fingerprints, report)[0]

    def evaluate_batch(
        self,
        sources: list[str],
        task: str,
        known_fingerprints: dict[str, str] | None = None,
        progress: Callable[[int, str], None] | None = None,
        seeds: Sequence[int] | None = None,
        exclude_seeds: Sequence[int] = (),
        known_behaviours: dict[str, list] | None = None,
    ) -> list[Outcome]:
        """Run the cascade on every source; one Outcome each, in order. Never raises for
        anything a candidate does.

        The batch's candidates and its baseline train on the same training seeds: `seeds`
        when given (re-running recorded ones), else drawn for this batch (pinned values, or
        values from the secret pool not in `exclude_seeds`; evaluation/seeds.py). Each score
        records them.

        The static check runs here, then each candidate is traced in its own sandboxed tracer
        (`workers` at a time); the candidates whose artifacts came back are trained together
        by one trainer: one compiled program per environment, a candidate index selecting the
        candidate (stages.evaluate_artifacts). A batch whose trainer hangs, crashes or runs
        out of memory is split, the candidate that was running when it died first, until the
        culprit fails alone with its own reason; the others are scored.

        Args:
            sources: candidate sources for `task`.
            task: the task's name (or Task).
            known_fingerprints: fingerprint -> candidate id; a candidate that behaves like one
                of them on the probe batch stops after the probes as a duplicate.
            progress: `progress(index, stage)` as candidate `index` enters "static",
                "probes", "baseline" (the baseline program trained on the batch's seeds,
                or read from the cache), "short" or "full".
            seeds: the training seed values to use (default: drawn).
            exclude_seeds: values a drawn set must avoid (a confirmation's earlier seeds).
            known_behaviours: candidate id -> behaviour descriptor (Outcome.behaviour); a
                candidate within `behaviour_novelty` of one stops after the probes as its
                near-duplicate (evaluation/near_duplicates.py).
        """
        task_obj = _resolve_task(task)
        if seeds is None:
            drawn = self.seeds.draw(exclude=exclude_seeds)
        else:
            drawn = TrainingSeeds(
                tuple(int(s) for s in seeds), pinned=self.seeds.pinned is not None
            )
        candidates = [_Pending(index, source, seeds=drawn) for index, source in enumerate(sources)]

        def announce(candidate: _Pending, stage: str) -> None:
            if progress:
                progress(candidate.index, stage)

        for candidate in candidates:
            announce(candidate, "static")
            self._check(candidate, task_obj)
        traced = [c for c in candidates if c.outcome is None]
        for candidate in traced:
            announce(candidate, "probes")
        if traced:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="metarl-trace") as pool:
                list(pool.map(lambda c: self._trace(c, task_obj), traced))
        self._precheck(task_obj, [c for c in candidates if c.outcome is None])
        ready = [c for c in candidates if c.outcome is None]
        for candidate in ready:  # the baseline on the batch's seeds (at once when cached)
            announce(candidate, "baseline")
        if ready:
            try:
                references = self.references(task_obj, drawn.values)
            except (RuntimeError, OSError, KeyError, ValueError) as error:
                if self.closing:  # its workers were stopped under it: an interruption
                    logger.info("baseline for %s stopped: the evaluator closed", task_obj.name)
                    reason = "the evaluation was stopped before the baseline was trained"
                else:
                    logger.exception("baseline for %s failed", task_obj.name)
                    reason = f"the baseline could not be trained: {error}"
                for candidate in ready:
                    candidate.outcome = Outcome.evaluator_fault(reason)
            else:
                known = KnownPrograms(known_fingerprints or {}, known_behaviours or {})
                slots = self._executor.slots
                self._batches.train_batch(task_obj, ready, references, known, announce, slots)
        return [self._finish(candidate) for candidate in candidates]

    def _check(self, candidate: "_Pending", task) -> None:
        """Stage 1, here: the static check of the source (never executes it)."""
        start = time.perf_counter()
        report = check_task_source(candidate.source, task)
        candidate.timings["static"] = time.perf_counter() - start
        if not report.ok:
            candidate.outcome = Outcome.failure("static", report.reason)

    # -- artifact pre-check (evaluation/artifact_precheck.py) ------------------------------------
    def _precheck(self, task, pending: list["_Pending"]) -> None:
        """Parse every traced artifact in one fresh tracer-type worker before a trainer sees any:
        one that crashes JAX's deserialiser fails there, never in the trainer."""
        settings = self.settings

        def run(job: dict, limit: float) -> WorkerResult:
            with self._slots:
                return self._executor.run("tracer", job, limit)

        start = time.perf_counter()
        artifacts = [candidate.artifact for candidate in pending]
        limit = min(settings.trace_timeout_s, settings.timeout_s)
        verdicts = precheck(run, task.name, artifacts, self.platform, limit, self.workers)
        for candidate, verdict in zip(pending, verdicts):
            candidate.timings["precheck"] = (time.perf_counter() - start) / len(pending)
            if verdict is not None:
                candidate.outcome = verdict

    # -- end of the artifact pre-check -----------------------------------------------------------
    def _trace(self, candidate: "_Pending", task) -> None:
        """Stage 2's untrusted half in a sandboxed tracer: probes and export of the source."""
        settings = self.settings
        probe_seed = (
            settings.probe_seed if settings.probe_seed is not None else secrets.randbelow(2**31)
        )
        with self._slots:
            traced = self._executor.run(
                "tracer",
                {
                    "kind": "trace",
                    "task": task.name,
                    "source": candidate.source,
                    "probe_seed": probe_seed,
                    "platform": self.platform,
                },
                min(settings.trace_timeout_s, settings.timeout_s),
            )
        candidate.sandbox = {
            "tracer_pid": traced.pid,
            "tracer_workdir": traced.workdir,
            "tracer_exit": traced.returncode,
            "tracer_status": traced.status,
            "isolation": traced.ready_info.get("isolation"),
            "network": traced.ready_info.get("network"),
            "rlimits": traced.ready_info.get("limits", {}),
            "limits": limits_dict(settings.limits()),
            "probe_seed": probe_seed,
            "worker_pid": traced.pid,
            "workdir": traced.workdir,
            "worker_exit": traced.returncode,
            "status": traced.status,
        }
        candidate.timings["trace"] = traced.timings.get("sandbox", 0.0)
        candidate.output = traced.output
        candidate.artifact, candidate.warnings, failure = read_trace(traced)
        # the trainer probes the artifact on inputs the tracer never saw
        fixed = settings.probe_seed is not None
        candidate.train_probe_seed = (probe_seed + 1) % 2**31 if fixed else secrets.randbelow(2**31)
        if failure is not None and traced.status == "startup":  # no candidate code ran
            candidate.outcome = Outcome.evaluator_fault(failure)
        elif failure is not None:
            candidate.outcome = Outcome.failure("probes", failure)
            # the tracer's phases; its wall time is "trace" (the trainer's is "sandbox")
            candidate.timings.update({k: v for k, v in traced.timings.items() if k != "sandbox"})

    def sample(
        self, source: str, task: str = "drift", points: int = 128, epsilon: float = 0.2
    ) -> DriftSamples:
        """A drift candidate's values and slopes on `drift_grid(points)`, sampled in a tracer.

        The static check runs here; the sampling (tracing.sample_candidate) runs in a sandboxed
        tracer under the tracer's time limit, and every number it returns is checked here.

        Args:
            source: the candidate's source (untrusted).
            task: the task; only a distillable one (Task.distillable) can be sampled.
            points: grid points per axis (1 to MAX_SAMPLE_POINTS).
            epsilon: the clip range passed to the drift.

        Returns:
            The samples; the grid's ratios and advantages are computed here.

        Raises:
            SampleFailure: the candidate failed the static check or could not be sampled.
            ValueError: a task that is not distillable, or points or epsilon out of range.
        """
        task_obj, points, epsilon = _resolve_task(task), int(points), float(epsilon)
        if not task_obj.distillable or not 1 <= points <= MAX_SAMPLE_POINTS:
            raise ValueError(
                f"only candidates of a distillable task (a function of ratio and advantage), "
                f"1 to {MAX_SAMPLE_POINTS} points per axis; {task_obj.name} is "
                + ("distillable" if task_obj.distillable else "not")
            )
        if not math.isfinite(epsilon):
            raise ValueError(f"epsilon must be finite, not {epsilon}")
        report = check_task_source(source, task_obj)
        if not report.ok:
            raise SampleFailure("static", report.reason)
        job = {"kind": "sample", "task": task_obj.name, "source": source, "points": points}
        job.update(epsilon=epsilon, first_stage="sample")
        with self._slots:
            run = self._executor.run(
                "tracer", job, min(self.settings.trace_timeout_s, self.settings.timeout_s)
            )
        value, slope = read_samples(run, points * points)
        grid = drift_grid(points)
        ratio = np.asarray(grid.ratio, np.float32)
        return DriftSamples(ratio, np.asarray(grid.advantage, np.float32), value, slope)

    def _run_trainer(self, job: dict, limit: float, on_event: OnEvent | None) -> WorkerResult:
        """One trainer job on the executor (one of the `workers` slots)."""
        with self._slots:
            return self._executor.run("trainer", job, limit, on_event)

    def training_limit(
        self, plan: list[PlannedRun], references: dict[str, Reference], candidates: int = 1
    ) -> float:
        """Seconds for stages 2b-4 of `candidates` candidates trained together
        (BatchTraining.training_limit)."""
        return self._batches.training_limit(plan, references, candidates)

    def _finish(self, candidate: "_Pending") -> Outcome:
        outcome = candidate.outcome or Outcome.evaluator_fault("no verdict was reached")
        outcome.reason = clean(outcome.reason, 4000)
        outcome.warnings = [clean(w, 2000) for w in candidate.warnings + outcome.warnings]
        trainer_timings = outcome.timings
        outcome.timings = {**trainer_timings, **candidate.timings}
        outcome.timings["sandbox"] = candidate.timings.get("trace", 0.0) + candidate.timings.get(
            "sandbox", 0.0
        )
        outcome.timings["total"] = time.perf_counter() - candidate.started
        outcome.sandbox = candidate.sandbox
        outcome.stdout = clean(candidate.output, self.settings.limits().output_chars)
        outcome.seeds_pinned = bool(candidate.seeds is not None and candidate.seeds.pinned)
        return outcome


@dataclass
class _Pending:
    """A candidate in the parent while its batch is evaluated."""

    index: int
    source: str
    started: float = field(default_factory=time.perf_counter)
    outcome: Outcome | None = None
    artifact: object = None
    train_probe_seed: int = 0
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    sandbox: dict = field(default_factory=dict)
    output: str = ""
    seeds: TrainingSeeds | None = None  # the batch's training seeds


def _baseline_key(task, program: str, entry: PlannedRun, seed: int, layout: tuple[int, ...]) -> str:
    return baseline_cache.baseline_key(
        task.name, program, entry.config, seed, entry.updates, entry.sweep, layout
    )


def evaluate_source(source: str, task: str, settings: CascadeSettings) -> Outcome:
    """One-shot convenience: workers started for this candidate only."""
    with Evaluator(settings, workers=1, prewarm=False) as evaluator:
        return evaluator.evaluate(source, task)
