"""The evaluation cascade: the one entry point that scores untrusted candidate source.

    static (parent, ast only) -> probes -> short run -> full run   (sandboxed worker process)

Each stage passes or stops the candidate with one clear reason, written for the LLM to read:

1. **static** (metarl.evaluators.static_check): parses; defines exactly the contracted function
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
task's baseline seed (PPO clip / Adam) trained with the same config and seeds. Baselines and
random returns are computed inside the worker, under the same timeout, and cached on disk
(METARL_CACHE_DIR). NaN/inf during training fails the stage, naming the update and seed.

Stages 2-4 run in a pre-warmed, disposable worker process with a wall-clock timeout, memory,
CPU-time and file-size limits, no network, a throwaway cwd and a scrubbed environment; see
metarl.evaluators.sandbox for the guarantees and how they are enforced.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import asdict, dataclass
from typing import Callable

from metarl.evaluators.outcome import Outcome
from metarl.evaluators.sandbox import SandboxLimits, WorkerPool, limits_dict
from metarl.evaluators.static_check import check_task_source


@dataclass
class CascadeSettings:
    suite: str = "classic"
    seeds: int = 4  # number of seeds; seed values 0..seeds-1 (deterministic)
    # stop after stage 3 when the normalised score on the suite's first env is below this
    # (0 = random policy, 1 = the task's baseline seed, same seeds and budget)
    short_run_threshold: float = 0.25
    total_timesteps: int | None = None  # override the suite's per-env budget (tests use tiny ones)
    short_timesteps: int | None = None  # override the suite's short budget (capped at the full one)
    timeout_s: float = 900.0  # wall clock for the whole sandboxed part (stages 2-4)
    memory_mb: int = 8192  # address-space limit and resident-memory watchdog of the worker
    heldout: bool = True  # also score the suite's held-out envs (never used for selection)
    skip_short: bool = False
    probe_seed: int | None = None  # None: fresh random probe inputs for every evaluation
    cpu_s: float | None = None  # RLIMIT_CPU of the worker; None: timeout_s * cores + 60
    max_file_mb: int = 64  # RLIMIT_FSIZE: the most output (stdout/stderr) a candidate may write
    # only these environments of the suite (training envs in this order, held-out envs only
    # when listed); None: the whole suite. For benchmarks and debugging, not for selection.
    envs: list[str] | None = None

    def limits(self) -> SandboxLimits:
        return SandboxLimits(
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            cpu_s=self.cpu_s,
            max_file_mb=self.max_file_mb,
        )

    def job_settings(self) -> dict:
        return asdict(self)


def _resolve_task(task):
    from metarl.tasks import get_task

    return get_task(task) if isinstance(task, str) else task


def _validate(settings: CascadeSettings) -> None:
    from metarl.evaluators.suites import get_suite

    suite = get_suite(settings.suite)  # UnknownSuite, a KeyError with a readable message
    if settings.envs is not None:
        unknown = [e for e in settings.envs if e not in suite.envs + suite.heldout]
        if unknown or not [e for e in settings.envs if e in suite.envs]:
            raise ValueError(
                f"envs {settings.envs} must include a training env of suite {suite.name!r} "
                f"({', '.join(suite.envs)}) and only its envs (held-out: {', '.join(suite.heldout) or 'none'})"
            )
    if int(settings.seeds) < 1:
        raise ValueError("seeds must be at least 1")


class Evaluator:
    """Owns pre-warmed sandbox workers and runs the cascade; `evaluate` is thread-safe.

    `workers` is both the number of evaluations that may run at once and the number of
    pre-warmed spare workers kept ready (with `prewarm=False`, workers start on demand).
    """

    def __init__(self, settings: CascadeSettings, workers: int = 1, prewarm: bool = True):
        _validate(settings)
        self.settings = settings
        self.workers = max(1, int(workers))
        self._slots = threading.BoundedSemaphore(self.workers)
        self._pool = WorkerPool(settings.limits(), spares=self.workers if prewarm else 0)

    # -- context manager ------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._pool.close()

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
                "static", report.reason, timings={"static": static_s, "total": time.perf_counter() - started}
            )

        probe_seed = settings.probe_seed if settings.probe_seed is not None else secrets.randbelow(2**31)
        job = {
            "kind": "evaluate",
            "task": task_obj.name,
            "source": source,
            "settings": settings.job_settings(),
            "probe_seed": probe_seed,
            "first_stage": "probes",
        }
        duplicate: dict = {}
        known = known_fingerprints or {}

        def on_event(message: dict) -> bool:
            event = message.get("event")
            if event == "stage" and progress:
                progress(message.get("stage", ""))
            if event == "fingerprint":
                duplicate["fingerprint"] = message.get("fingerprint")
                if message.get("fingerprint") in known:
                    duplicate["of"] = known[message["fingerprint"]]
                    return True
            return False

        with self._slots:
            worker = self._pool.acquire()
            run = worker.run(job, settings.timeout_s, on_event)

        sandbox = {
            "network": run.ready_info.get("network"),
            "rlimits": run.ready_info.get("limits", {}),
            "limits": limits_dict(settings.limits()),
            "probe_seed": probe_seed,
            "worker_pid": run.ready_info.get("pid"),
            "workdir": run.workdir,
            "worker_exit": run.returncode,
            "status": run.status,
        }
        if run.status == "ok" and run.result.get("kind") == "evaluate":
            outcome = Outcome.from_dict(run.result["payload"])
        elif run.status == "ok":  # the worker's own error, not a verdict on the candidate
            payload = run.result.get("payload", {})
            outcome = Outcome.failure(
                run.stage, f"internal evaluator error in stage {run.stage}: {payload.get('error')}"
            )
            outcome.warnings.append(payload.get("traceback", "")[-2000:])
        elif run.status == "stopped" and "of" in duplicate:
            outcome = Outcome(
                passed=False,
                stage="probes",
                reason=f"behaves identically to candidate {duplicate['of']}",
                duplicate_of=duplicate["of"],
            )
        else:
            outcome = Outcome.failure(run.stage, run.reason or f"stopped ({run.status})")
        if outcome.fingerprint is None:
            outcome.fingerprint = duplicate.get("fingerprint")
        outcome.timings = {
            "static": static_s,
            **run.timings,
            **outcome.timings,
            "total": time.perf_counter() - started,
        }
        outcome.sandbox = sandbox
        outcome.stdout = run.output
        return outcome

    def baseline(self, task: str) -> dict:
        """The task's baseline seed on every env of the suite (cached): env -> EnvRun."""
        from metarl.evaluators.training import EnvRun

        task_obj = _resolve_task(task)
        job = {
            "kind": "baseline",
            "task": task_obj.name,
            "settings": self.settings.job_settings(),
            "first_stage": "full",
        }
        with self._slots:
            worker = self._pool.acquire()
            run = worker.run(job, self.settings.timeout_s)
        if run.status != "ok" or run.result.get("kind") != "baseline":
            detail = run.reason or (run.result or {}).get("payload", {}).get("error")
            raise RuntimeError(f"computing the {task_obj.name} baseline failed: {detail}")
        runs = {}
        for env, data in run.result["payload"]["baselines"].items():
            random_mean = data.pop("random_mean", None)
            for derived in ("mean", "std", "steps_per_s"):
                data.pop(derived, None)
            data["curve"] = [c for c in data.get("curve", [])]
            envrun = EnvRun(**data)
            envrun.extra["random_mean"] = random_mean
            runs[env] = envrun
        return runs


def evaluate_source(source: str, task: str, settings: CascadeSettings) -> Outcome:
    """One-shot convenience: a worker started for this candidate only."""
    with Evaluator(settings, workers=1, prewarm=False) as evaluator:
        return evaluator.evaluate(source, task)
