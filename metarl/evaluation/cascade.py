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
   stops as a duplicate.
3. **short run**: the suite's first environment at the short budget (`short_timesteps`, default
   the suite's `short_budget`, never more than the full budget), all seeds. The candidate stops
   here when its normalised score there is below `short_run_threshold` (default 0.25: a quarter
   of the way from a random policy to the task's baseline seed). When the baseline is no better
   than random at that budget the score is undefined and the candidate is not filtered (a
   warning says so). When the short budget equals the full budget the short run *is* the full
   run on that environment and is not repeated.
4. **full run**: every training environment of the suite (and, with `heldout`, the held-out
   ones), all seeds, full budget. Fitness = mean normalised score over the training
   environments (scoring.aggregate); `heldout` = the same over held-out environments.

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
stops there), and sends back an artifact; the *trainer*, which never runs candidate Python,
verifies the artifact (rl/artifact.py), probes it again on inputs the tracer never saw,
fingerprints it and trains it (stages 3-4; limit scaled from the baseline's measured time for the
same work, `train_timeout_factor` x, at least `train_timeout_floor_s`, at most `timeout_s`).
Every message from either is validated here; the scores are recomputed here from the raw
returns and this process's own baselines, so the verdict never depends on a number computed in a
process that shared anything with the candidate. Candidate text (reasons, output) is cleaned
(evaluation/text.py) before it reaches a terminal, the archive or a prompt.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from dataclasses import asdict
from typing import Callable

from metarl import platform
from metarl.evaluation import baseline_cache
from metarl.evaluation.outcome import MalformedResult, Outcome, env_score, parse_outcome
from metarl.evaluation.sandbox import (
    WorkerPool,
    WorkerResult,
    check_bubblewrap,
    limits_dict,
)
from metarl.evaluation.settings import CascadeSettings, PlannedRun, Reference, plan_runs, validate
from metarl.evaluation.static_check import check_task_source
from metarl.evaluation.text import clean
from metarl.rl.scoring import aggregate
from metarl.rl.training import EnvRun
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash

logger = logging.getLogger(__name__)


def _resolve_task(task):

    return get_task(task) if isinstance(task, str) else task


class Evaluator:
    """Owns pre-warmed sandbox workers and runs the cascade; `evaluate` is thread-safe.

    `workers` is both the number of evaluations that may run at once and the number of
    pre-warmed spare workers of each role kept ready (with `prewarm=False`, on demand).

    Raises:
        SandboxUnavailable: when bubblewrap cannot run here and `unsafe_no_sandbox` is off.
    """

    def __init__(self, settings: CascadeSettings, workers: int = 1, prewarm: bool = True):
        validate(settings)
        if settings.unsafe_no_sandbox:
            logger.warning(
                "unsafe_no_sandbox: candidate code runs WITHOUT bubblewrap; it can read this "
                "machine's files and environment"
            )
        else:
            check_bubblewrap()
        self.settings = settings
        self.workers = max(1, int(workers))
        self.platform = platform.backend()
        self._slots = threading.BoundedSemaphore(self.workers)
        spares = self.workers if prewarm else 0
        self._tracers = WorkerPool(settings.limits(), spares=spares, role="tracer")
        self._trainers = WorkerPool(settings.limits(), spares=spares, role="trainer")
        self._references: dict[tuple[str, str], Reference] = {}
        self._references_lock = threading.Lock()

    # -- context manager ------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._tracers.close()
        self._trainers.close()

    # -- references (baselines, random returns) -------------------------------------------------
    def references(self, task) -> dict[str, Reference]:
        """config hash -> Reference for every planned run; trains missing baselines (cached)."""
        task_obj = _resolve_task(task)
        plan = plan_runs(self.settings)
        seeds = list(range(int(self.settings.seeds)))
        program = source_hash(task_obj.baseline_program().source)
        with self._references_lock:
            missing = []
            for entry in plan:
                memo = (task_obj.name, entry.config.config_hash())
                if memo in self._references:
                    continue
                run = baseline_cache.load(
                    baseline_cache.baseline_key(task_obj.name, program, entry.config, seeds)
                )
                random = baseline_cache.load(baseline_cache.random_key(entry.config.env_name))
                if run is None or random is None:
                    missing.append(entry.config.config_hash())
                    continue
                self._references[memo] = _reference(run, random["return"])
            if missing:
                self._train_baselines(task_obj, plan, sorted(set(missing)), program, seeds)
            return {
                entry.config.config_hash(): self._references[
                    (task_obj.name, entry.config.config_hash())
                ]
                for entry in plan
            }

    def _train_baselines(self, task, plan, config_hashes, program, seeds) -> None:
        job = {
            "kind": "baseline",
            "task": task.name,
            "settings": self.settings.job_settings(),
            "config_hashes": config_hashes,
            "platform": self.platform,
        }
        limit = max(self.settings.timeout_s, 600.0) * len(config_hashes)
        with self._slots:
            run = self._trainers.acquire().run(job, limit)
        payload = (run.result or {}).get("payload") if run.status == "ok" else None
        if not isinstance(payload, dict) or run.result.get("kind") != "baseline":
            detail = run.reason or (payload or {}).get("error")
            raise RuntimeError(f"computing the {task.name} baseline failed: {clean(detail, 2000)}")
        by_hash = {e.config.config_hash(): e.config for e in plan}
        for data in payload.get("runs", []):
            config = by_hash[data.pop("config_hash")]
            random_return = float(payload["random"][config.env_name])
            for derived in ("mean", "std", "steps_per_s"):
                data.pop(derived, None)
            if data.get("nonfinite_update") is not None:
                raise RuntimeError(f"the {task.name} baseline diverged on {config.env_name}")
            baseline_cache.save(
                baseline_cache.baseline_key(task.name, program, config, seeds), data
            )
            baseline_cache.save(
                baseline_cache.random_key(config.env_name),
                {"env": config.env_name, "return": random_return},
            )
            self._references[(task.name, config.config_hash())] = _reference(data, random_return)

    def baseline(self, task: str) -> dict:
        """The task's baseline program on every env of the suite (cached): env -> EnvRun."""

        references = self.references(task)
        runs = {}
        for entry in plan_runs(self.settings):
            if entry.stage == "full":
                reference = references[entry.config.config_hash()]
                run = EnvRun(**reference.run)
                run.extra["random_mean"] = reference.random_mean
                runs[entry.config.env_name] = run
        return runs

    # -- the cascade -----------------------------------------------------------------------------
    def evaluate(
        self,
        source: str,
        task: str,
        known_fingerprints: dict[str, str] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> Outcome:
        """Run the cascade on `source` for `task`; never raises for anything the candidate does.

        `known_fingerprints` maps fingerprint -> candidate id; a candidate that behaves like one
        of them on the probe batch stops after the probes as a duplicate. `progress(stage)` is
        called as each stage starts ("static", "probes", "short", "full").
        """
        started = time.perf_counter()
        task_obj = _resolve_task(task)
        settings = self.settings
        if progress:
            progress("static")
        report = check_task_source(source, task_obj)
        static_s = time.perf_counter() - started
        if not report.ok:
            return Outcome.failure(
                "static",
                report.reason,
                timings={"static": static_s, "total": time.perf_counter() - started},
            )
        if progress:
            progress("probes")
        probe_seed = (
            settings.probe_seed if settings.probe_seed is not None else secrets.randbelow(2**31)
        )
        with self._slots:
            traced = self._tracers.acquire().run(
                {
                    "kind": "trace",
                    "task": task_obj.name,
                    "source": source,
                    "probe_seed": probe_seed,
                    "platform": self.platform,
                },
                min(settings.trace_timeout_s, settings.timeout_s),
            )
        sandbox = {
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
        timings = {"static": static_s, "trace": traced.timings.get("sandbox", 0.0)}
        artifact, warnings, failure = _read_trace(traced)
        if failure is not None:
            outcome = Outcome.failure("probes", failure, warnings=warnings)
            return self._finish(outcome, sandbox, timings, traced.output, started, traced.timings)

        try:
            references = self.references(task_obj)
        except (RuntimeError, OSError, KeyError, ValueError) as error:
            logger.exception("baseline for %s failed", task_obj.name)
            outcome = Outcome.failure("probes", f"internal evaluator error (baseline): {error}")
            return self._finish(outcome, sandbox, timings, traced.output, started, traced.timings)

        duplicate: dict = {}
        known = known_fingerprints or {}

        def on_event(message: dict) -> bool:
            event = message.get("event")
            if event == "stage" and progress and message.get("stage") in ("short", "full"):
                progress(message["stage"])
            if event == "fingerprint" and isinstance(message.get("fingerprint"), str):
                duplicate["fingerprint"] = message["fingerprint"]
                if message["fingerprint"] in known:
                    duplicate["of"] = known[message["fingerprint"]]
                    return True
            return False

        plan = plan_runs(settings)
        limit = self.training_limit(plan, references)
        job = {
            "kind": "evaluate",
            "task": task_obj.name,
            "artifact": artifact,
            "settings": settings.job_settings(),
            # the trainer probes the artifact on inputs the tracer never saw
            "probe_seed": (probe_seed + 1) % 2**31
            if settings.probe_seed is not None
            else secrets.randbelow(2**31),
            "platform": self.platform,
            "references": [
                {"config_hash": key, "baseline_mean": r.baseline_mean, "random_mean": r.random_mean}
                for key, r in references.items()
            ],
        }
        with self._slots:
            run = self._trainers.acquire().run(job, limit, on_event)
        sandbox.update(
            worker_pid=run.pid,
            workdir=run.workdir,
            worker_exit=run.returncode,
            status=run.status,
            train_limit_s=limit,
        )
        outcome = self._read_training(run, duplicate, plan, references)
        if outcome.fingerprint is None:
            outcome.fingerprint = duplicate.get("fingerprint")
        outcome.warnings = warnings + outcome.warnings
        timings.update(run.timings)
        timings["sandbox"] = timings["trace"] + run.timings.get("sandbox", 0.0)
        return self._finish(outcome, sandbox, timings, traced.output, started, {})

    def training_limit(self, plan: list[PlannedRun], references: dict[str, Reference]) -> float:
        """Seconds for stages 2b-4: scaled from the baseline's time for the same runs."""
        settings = self.settings
        work = sum(references[entry.config.config_hash()].seconds for entry in plan)
        scaled = max(settings.train_timeout_floor_s, settings.train_timeout_factor * work)
        return min(settings.timeout_s, scaled)

    def _read_training(self, run: WorkerResult, duplicate: dict, plan, references) -> Outcome:
        if run.status == "stopped" and "of" in duplicate:
            return Outcome(
                passed=False,
                stage="probes",
                reason=f"behaves identically to candidate {duplicate['of']}",
                duplicate_of=duplicate["of"],
            )
        if run.status != "ok":
            return Outcome.failure(
                run.stage if run.stage in ("probes", "short", "full") else "probes",
                run.reason or f"stopped ({run.status})",
            )
        kind, payload = run.result.get("kind"), run.result.get("payload")
        if kind != "evaluate":
            error = payload.get("error") if isinstance(payload, dict) else None
            logger.error("trainer error: %s", payload)
            return Outcome.failure(
                run.stage, f"internal evaluator error in stage {run.stage}: {error}"
            )
        try:
            return verify_outcome(parse_outcome(payload), plan, references, self.settings)
        except MalformedResult as error:
            logger.error("malformed trainer result: %s", error)
            return Outcome.failure(
                run.stage, f"internal evaluator error: malformed result ({error})"
            )

    def _finish(self, outcome, sandbox, timings, output, started, extra_timings) -> Outcome:
        outcome.reason = clean(outcome.reason, 4000)
        outcome.warnings = [clean(w, 2000) for w in outcome.warnings]
        outcome.timings = {
            **extra_timings,
            **outcome.timings,
            **timings,
            "total": time.perf_counter() - started,
        }
        outcome.sandbox = sandbox
        outcome.stdout = clean(output, self.settings.limits().output_chars)
        return outcome


def _reference(run: dict, random_return: float) -> Reference:
    returns = run["final_returns"]
    return Reference(
        baseline_mean=float(sum(returns) / len(returns)),
        random_mean=float(random_return),
        seconds=float(run.get("compile_s", 0.0)) + float(run.get("run_s", 0.0)),
        run=run,
    )


def _read_trace(run: WorkerResult) -> tuple[object, list[str], str | None]:
    """(artifact, warnings, failure reason) from the tracer; every field checked."""
    if run.status != "ok":
        return None, [], run.reason or f"the tracer stopped ({run.status})"
    payload = run.result.get("payload")
    if run.result.get("kind") != "trace" or not isinstance(payload, dict):
        if run.result.get("kind") == "error" and isinstance(payload, dict):
            return None, [], f"the candidate broke its tracer: {str(payload.get('error'))[:500]}"
        return None, [], "the tracer sent a malformed result"
    warnings = payload.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        return None, [], "the tracer sent a malformed result (warnings)"
    warnings = [w[:2000] for w in warnings[:20]]
    if payload.get("ok") is True and isinstance(payload.get("artifact"), dict):
        return payload["artifact"], warnings, None
    reason = payload.get("reason")
    if payload.get("ok") is False and isinstance(reason, str) and reason:
        return None, warnings, reason
    return None, [], "the tracer sent a malformed result"


def verify_outcome(
    outcome: Outcome,
    plan: list[PlannedRun],
    references: dict[str, Reference],
    settings: CascadeSettings,
) -> Outcome:
    """Recompute every score from the raw returns and this process's own references.

    The trainer's own normalised scores, fitness and short-run verdict are replaced by the ones
    computed here; a result that does not follow the plan is malformed.

    Raises:
        MalformedResult: when the runs do not match the plan.
    """
    scores = []
    for index, score in enumerate(outcome.env_scores):
        if index >= len(plan) or score.env != plan[index].config.env_name:
            raise MalformedResult(f"env score {index} ({score.env}) is not the planned run")
        entry = plan[index]
        steps = entry.config.num_updates * entry.config.batch_size  # what the trainer runs
        if score.total_timesteps != steps or score.seeds != list(range(settings.seeds)):
            raise MalformedResult(f"env score {index} has the wrong budget or seeds")
        if score.stage not in ("short", "full") or (
            entry.stage == "full" and score.stage != "full"
        ):
            raise MalformedResult(f"env score {index} has stage {score.stage!r}")
        reference = references[entry.config.config_hash()]
        raw = asdict(score)
        raw["final_returns"] = raw.pop("returns")
        scores.append(
            env_score(
                raw, reference.baseline_mean, reference.random_mean, entry.heldout, score.stage
            )
        )
    # the short run reused as the full run on the first env appears once, as "full"
    expected = len(plan) - (
        1
        if plan and plan[0].stage == "short" and len(plan) > 1 and plan[1].config == plan[0].config
        else 0
    )
    outcome.env_scores = scores
    short = [s for s in scores if s.stage == "short"] or [
        s for i, s in enumerate(scores) if plan[i].stage == "short"
    ]
    threshold = settings.short_run_threshold
    if outcome.passed:
        if len(scores) != expected:
            raise MalformedResult(f"{len(scores)} env scores for {expected} planned runs")
        for score in short:
            if score.normalised is not None and score.normalised < threshold:
                raise MalformedResult("a passed candidate is below the short-run threshold")
        full = [s for s in scores if s.stage == "full"]
        train = [s.normalised for s in full if not s.heldout and s.normalised is not None]
        held = [s.normalised for s in full if s.heldout and s.normalised is not None]
        outcome.fitness = aggregate(train) if train else None
        outcome.heldout = aggregate(held) if held else None
        if outcome.fitness is not None and not math.isfinite(outcome.fitness):
            outcome.fitness = None
    else:
        outcome.fitness = outcome.heldout = None
    return outcome


def evaluate_source(source: str, task: str, settings: CascadeSettings) -> Outcome:
    """One-shot convenience: workers started for this candidate only."""
    with Evaluator(settings, workers=1, prewarm=False) as evaluator:
        return evaluator.evaluate(source, task)
