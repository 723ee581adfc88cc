"""The sandbox worker: `python -m metarl.evaluators.worker --role tracer|trainer ...`.

Started by metarl.evaluators.sandbox inside bubblewrap (see there). In order:

1. sets its resource limits (address space, CPU time, file size, open files, no core); outside
   bubblewrap (the explicit opt-out only) also isolates itself from the network;
2. imports jax and metarl and initialises XLA (pre-warming), then writes `ready` on the private
   result pipe, and goes on importing what its role needs until a job arrives;
3. reads exactly one job (a JSON line) from stdin, runs it, writing progress messages and one
   final `result` message on the pipe, and exits. The parent kills its process group anyway.

Two roles, never mixed in one process:
- **tracer**: the only process that runs candidate Python. It loads the candidate, runs the
  task's probes on it (detailed, friendly reasons for the proposer) and exports it per element
  (evaluators/artifact.py). Once candidate code has run, the process is the candidate's: the
  parent treats everything it sends (the artifact, the reason, its output) as untrusted data.
- **trainer**: trusted code only. It verifies the artifact, probes it again on inputs the
  tracer never saw, computes the fingerprint, and trains and scores it (stages 2-4); or trains
  the task's baseline program for the parent's cache.
Stage 1 (static check) ran in the parent.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time

CLONE_NEWNET = 0x40000000
_started = time.perf_counter()


# --- isolation ----------------------------------------------------------------------------------
def isolate_network() -> str:
    """'netns' when this process now lives in an empty network namespace; else 'unavailable'."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) == 0:
            return "netns"
    except (OSError, AttributeError):
        pass
    return "unavailable"


def stub_sockets() -> None:
    """Fallback when no network namespace is available: refuse Python-level sockets."""
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network access is disabled in the metarl sandbox")

    class RefusingSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            refuse()

    socket.socket = RefusingSocket
    for name in ("create_connection", "create_server", "getaddrinfo", "gethostbyname",
                 "socketpair", "fromfd"):
        if hasattr(socket, name):
            setattr(socket, name, refuse)


def set_limits(memory_mb: int, cpu_s: int, max_file_mb: int, nofile: int) -> dict:
    import resource

    applied = {}

    def limit(name, value):
        kind = getattr(resource, name, None)
        if kind is None:
            return
        try:
            resource.setrlimit(kind, (value, value))
            applied[name] = value
        except (ValueError, OSError) as error:
            applied[name] = f"failed: {error}"

    if memory_mb > 0 and not cuda_present():
        limit("RLIMIT_AS", memory_mb * 2**20)
    else:
        applied["RLIMIT_AS"] = "skipped (CUDA reserves large address space; parent watchdog only)"
    if cpu_s > 0:
        import resource as r

        try:
            r.setrlimit(r.RLIMIT_CPU, (cpu_s, cpu_s + 5))
            applied["RLIMIT_CPU"] = cpu_s
        except (ValueError, OSError) as error:
            applied["RLIMIT_CPU"] = f"failed: {error}"
    limit("RLIMIT_FSIZE", max_file_mb * 2**20)
    limit("RLIMIT_NOFILE", nofile)
    limit("RLIMIT_CORE", 0)
    return applied


def cuda_present() -> bool:
    import importlib.util

    for name in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12",
                 "jax_plugins.xla_cuda13"):
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def abandon(code: int) -> None:
    """Exit without the parent: remove our own temp dir (the parent would have), then go."""
    import shutil

    workdir = os.getcwd()
    if os.path.basename(workdir).startswith("metarl-sandbox-"):
        shutil.rmtree(workdir, ignore_errors=True)
    os._exit(code)


def watch_parent() -> None:
    """Exit when the parent dies (we get re-parented), so no orphan keeps training."""
    parent = os.getppid()

    def loop():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                abandon(3)

    threading.Thread(target=loop, daemon=True, name="metarl-parent-watch").start()


# --- the result channel -------------------------------------------------------------------------
class Channel:
    def __init__(self, fd: int):
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, event: str, **data) -> None:
        from metarl.evaluators.outcome import _finite_or_none

        line = (json.dumps(_finite_or_none({"event": event, **data})) + "\n").encode()
        with self.lock:
            view = memoryview(line)
            while view:
                written = os.write(self.fd, view)
                view = view[written:]


# --- the tracer: the only place candidate Python runs ---------------------------------------
class StageFailure(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def load_candidate(source: str, function_name: str):
    """Execute the candidate module in the restricted namespace (plus `print`, captured)."""
    import builtins

    from metarl.tasks.candidate import candidate_namespace
    from metarl.tasks.probing import describe_exception, register_candidate_source

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


def trace(job: dict) -> dict:
    """Load the candidate, run the task's probes on it (friendly, detailed reasons), export it.

    Runs in the tracer, which the candidate fully controls once its code runs: nothing here is
    trusted by the parent. What matters is the artifact, which the trainer verifies and probes
    again before any training.
    """
    from metarl.evaluators.artifact import ArtifactRejected, encode, export_variants, load_variants
    from metarl.tasks import get_task
    from metarl.tasks.probing import describe_exception

    task = get_task(job["task"])
    warnings: list[str] = []
    try:
        function = load_candidate(job["source"], task.function_name)
        report = task.probes(function, int(job.get("probe_seed", 0)))
        warnings.extend(report.warnings)
        if not report.ok:
            raise StageFailure(report.reason)
        try:
            blobs = export_variants(
                task.per_element(function), task.element_signature, job["platform"]
            )
        except Exception as error:
            raise StageFailure(describe_exception(
                error, f"exporting {task.function_name} for one element (scalar inputs; the "
                "trainer applies it to every element)",
            )) from error
        try:
            load_variants(blobs, task.element_signature, job["platform"])
        except ArtifactRejected as error:
            raise StageFailure(f"the exported program was refused: {error}") from error
    except StageFailure as failure:
        return {"ok": False, "reason": failure.reason, "warnings": warnings}
    except MemoryError:
        return {
            "ok": False,
            "reason": "ran out of memory while probing the candidate (MemoryError); keep "
            "intermediate arrays the size of the inputs",
            "warnings": warnings,
        }
    return {"ok": True, "artifact": encode(blobs), "warnings": warnings}


# --- the trainer: trusted code only; candidates arrive as verified artifacts --------------------
class Job:
    """Stages 2-4 for one exported candidate (or the baseline program alone).

    Never executes candidate Python: the candidate is the artifact the tracer exported, verified
    (evaluators/artifact.py) and probed again here on fresh inputs before training. Baselines
    and random returns come with the job (the parent computed them in workers that never saw a
    candidate); the parent recomputes every score from the raw returns sent back.
    """

    def __init__(self, job: dict, channel: Channel):
        from metarl.evaluators.cascade import CascadeSettings, plan_runs
        from metarl.tasks import get_task

        self.job = job
        self.channel = channel
        self.settings = CascadeSettings(**job["settings"])
        self.task = get_task(job["task"])
        self.plan = plan_runs(self.settings)
        self.seeds = list(range(int(self.settings.seeds)))
        self.references = {r["config_hash"]: r for r in job.get("references", [])}
        self.timings: dict[str, float] = {}
        self.warnings: list[str] = []
        self.stage = "probes"
        self.stage_started: float | None = None

    def announce(self, stage: str | None) -> None:
        """Start `stage` (None: the end); the previous stage's wall time goes to timings."""
        now = time.perf_counter()
        if self.stage_started is not None:
            self.add_time(self.stage, now - self.stage_started)
        self.stage_started = now if stage else None
        if stage:
            self.stage = stage
            self.channel.send("stage", stage=stage)

    def add_time(self, key: str, seconds: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + seconds

    def load(self, artifact: object):
        from metarl.evaluators.artifact import ArtifactRejected, decode, load_variants

        start = time.perf_counter()
        names = set(self.task.per_element(lambda *args: None))
        try:
            blobs = decode(artifact, names)
            calls = load_variants(blobs, self.task.element_signature, self.job["platform"])
        except ArtifactRejected as error:
            raise StageFailure(f"the exported program was refused: {error}") from error
        self.add_time("load_artifact", time.perf_counter() - start)
        return self.task.assemble(calls)

    def train(self, function, config):
        from metarl.evaluators.training import run_training
        from metarl.tasks.probing import describe_exception

        try:
            run = run_training(config, self.task.plug(function), self.seeds)
        except Exception as error:
            raise StageFailure(describe_exception(
                error, f"training on {config.env_name} ({config.total_timesteps} steps)",
            )) from error
        self.add_time("compile", run.compile_s)
        self.add_time("run", run.run_s)
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

    def score(self, run, entry) -> "EnvScore":
        from metarl.evaluators.outcome import env_score

        reference = self.references[entry.config.config_hash()]
        return env_score(
            run.to_dict(), reference["baseline_mean"], reference["random_mean"], entry.heldout,
            entry.stage,
        )

    # the cascade, stages 2-4
    def evaluate(self) -> dict:
        from metarl.evaluators.outcome import Outcome
        from metarl.evaluators.scoring import aggregate
        from metarl.tasks.probing import describe_exception, fingerprint

        outcome = Outcome(passed=False, stage="probes")
        threshold = float(self.settings.short_run_threshold)
        try:
            # stage 2 (trusted half): the artifact, probed on inputs the tracer never saw
            self.announce("probes")
            function = self.load(self.job["artifact"])
            if self.task.probes is not None:
                report = self.task.probes(function, int(self.job["probe_seed"]))
                if not report.ok:
                    raise StageFailure(f"the exported program failed the probes: {report.reason}")
            if self.task.fingerprint_inputs is not None:
                try:
                    outcome.fingerprint = fingerprint(function, self.task.fingerprint_inputs())
                except Exception as error:  # ProbeFailure and the like
                    raise StageFailure(str(error)) from error
                self.channel.send("fingerprint", fingerprint=outcome.fingerprint)

            # stages 3 and 4, as planned from the settings (the same plan the parent scores)
            reused = None
            for entry in self.plan:
                if entry.stage != self.stage:
                    self.announce(entry.stage)
                if reused is not None and entry.stage == "full" and reused[0] == entry.config:
                    reused[1].stage = "full"  # the short run was this very run
                    continue
                score = self.score(self.train(function, entry.config), entry)
                outcome.env_scores.append(score)
                if entry.stage != "short":
                    continue
                if score.normalised is None:
                    self.warnings.append(
                        f"short run: the normalised score on {score.env} is undefined (the "
                        "baseline is no better than a random policy at this budget); not filtered"
                    )
                elif score.normalised < threshold:
                    raise StageFailure(short_run_reason(score, threshold, self.task.baseline_seed))
                reused = (entry.config, score)
            full = [s for s in outcome.env_scores if s.stage == "full"]
            train_scores = [s.normalised for s in full if not s.heldout and s.normalised is not None]
            held_scores = [s.normalised for s in full if s.heldout and s.normalised is not None]
            outcome.fitness = aggregate(train_scores) if train_scores else None
            outcome.heldout = aggregate(held_scores) if held_scores else None
            outcome.passed = True
            outcome.stage = "full"
        except StageFailure as failure:
            outcome.passed = False
            outcome.stage = self.stage
            outcome.reason = failure.reason
        except MemoryError:
            outcome.passed = False
            outcome.stage = self.stage
            outcome.reason = (
                f"ran out of memory in stage {self.stage} (MemoryError); keep intermediate "
                "arrays the size of the inputs"
            )
        except Exception as error:  # anything the stage wrappers did not anticipate
            outcome.passed = False
            outcome.stage = self.stage
            outcome.reason = describe_exception(error, f"running stage {self.stage}")
        self.announce(None)
        outcome.warnings = self.warnings
        outcome.timings = self.timings
        return outcome.to_dict()

    def baselines(self) -> dict:
        """The task's baseline program on the requested configs, and each env's random return.

        The baseline is the task's baseline seed program (trusted source) exported and loaded
        exactly as a candidate's is, so a candidate identical to it scores exactly 1.0.
        """
        from metarl.evaluators.artifact import export_variants, load_variants
        from metarl.evaluators.scoring import random_policy_return
        from metarl.tasks.candidate import load_function

        task, platform = self.task, self.job["platform"]
        seed = task.baseline()
        per_element = task.per_element(load_function(seed.source, task.function_name))
        blobs = export_variants(per_element, task.element_signature, platform)
        function = task.assemble(load_variants(blobs, task.element_signature, platform))
        wanted = set(self.job["config_hashes"])
        self.announce("full")
        runs, randoms = [], {}
        for entry in self.plan:
            key = entry.config.config_hash()
            if key not in wanted:
                continue
            wanted.discard(key)
            runs.append({"config_hash": key, **self.train(function, entry.config).to_dict()})
            if entry.config.env_name not in randoms:
                start = time.perf_counter()
                randoms[entry.config.env_name] = random_policy_return(entry.config.env_name)
                self.add_time("random_return", time.perf_counter() - start)
        self.announce(None)
        return {"runs": runs, "random": randoms, "timings": self.timings}


def short_run_reason(score, threshold: float, baseline_name: str) -> str:
    return (
        f"short run: normalised score {score.normalised:.3f} on {score.env} after "
        f"{score.total_timesteps} steps (mean return {score.mean:.4g}; random policy "
        f"{score.random_mean:.4g} = 0, baseline {baseline_name} {score.baseline_mean:.4g} = 1) "
        f"is below the threshold {threshold:g}"
    )


def introspect() -> dict:
    """What the sandbox looks like from inside (trusted diagnostic job, used by tests)."""
    import resource
    import socket

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


# The training stack (gymnax pulls in matplotlib, seaborn and scipy: ~1.6 s of the ~3 s import)
# is imported after `ready`, one module at a time, for as long as no job is waiting. A spare
# worker that waits long enough is fully warm; a job that arrives early starts at once and
# imports only what it uses (most failing candidates never reach training).
PRELOAD = {
    # the tracer probes and exports (optax for the optimizer task's probes), nothing more
    "tracer": ("optax", "metarl.evaluators.artifact"),
    "trainer": (
    "optax",
    "flax.linen",
    "gymnax",
    "metarl.evaluators.environments",
    "metarl.evaluators.ppo",
    "metarl.evaluators.training",
    "metarl.evaluators.scoring",
    "metarl.evaluators.artifact",
    ),
}


def preload_until_job(role: str) -> float:
    import importlib
    import select

    start = time.perf_counter()
    for module in PRELOAD[role]:
        waiting, _, _ = select.select([sys.stdin], [], [], 0)
        if waiting:
            break
        importlib.import_module(module)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m metarl.evaluators.worker")
    parser.add_argument("--role", choices=("tracer", "trainer"), default="trainer")
    parser.add_argument("--sandboxed", action="store_true", help="started inside bubblewrap")
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, default=8192)
    parser.add_argument("--cpu-s", type=int, default=0)
    parser.add_argument("--max-file-mb", type=int, default=64)
    parser.add_argument("--nofile", type=int, default=1024)
    args = parser.parse_args(argv)

    # Python ignores SIGXFSZ; restore the default so that writing past RLIMIT_FSIZE (a candidate
    # printing without end) ends the worker, which the parent reports as an output-limit failure.
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    # inside bubblewrap the network namespace is already empty (and unshare is not permitted)
    network = "netns" if args.sandboxed else isolate_network()
    limits = set_limits(args.memory_mb, args.cpu_s, args.max_file_mb, args.nofile)
    watch_parent()
    channel = Channel(args.result_fd)

    import_start = time.perf_counter()
    import metarl  # noqa: F401 - sets XLA_FLAGS before jax initialises

    import jax
    import jax.numpy as jnp

    import metarl.tasks  # noqa: F401
    import metarl.tasks.probing  # noqa: F401

    jax.block_until_ready(jax.jit(lambda x: x + 1)(jnp.zeros(2)))  # initialise the XLA backend
    if network != "netns":
        stub_sockets()
        network = "socket-stub"
    channel.send(
        "ready",
        pid=os.getpid(),
        import_s=time.perf_counter() - import_start,
        since_start_s=time.perf_counter() - _started,
        network=network,
        limits=limits,
        role=args.role,
        isolation="bubblewrap" if args.sandboxed else "unsandboxed",
    )
    preload_s = preload_until_job(args.role)

    line = sys.stdin.buffer.readline()
    if not line.strip():
        abandon(0)  # the pool was closed, or the parent died: nothing to do
    sys.stdin.close()
    job = json.loads(line)
    job_start = time.perf_counter()

    try:
        kind = job.get("kind")
        if (kind == "trace") != (args.role == "tracer") and kind != "introspect":
            raise ValueError(f"a {args.role} does not run {kind!r} jobs")
        if kind == "introspect":
            payload = introspect()
        elif kind == "trace":
            payload = trace(job)
        elif kind == "baseline":
            payload = Job(job, channel).baselines()
        else:
            payload = Job(job, channel).evaluate()
            payload.setdefault("timings", {})["preload"] = preload_s
            payload["timings"]["worker_job"] = time.perf_counter() - job_start
        channel.send("result", kind=job.get("kind", "evaluate"), payload=payload, network=network)
    except BaseException as error:  # noqa: BLE001 - an evaluator error, not the candidate's
        import traceback

        channel.send(
            "result",
            kind="error",
            payload={
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc()[-4000:],
            },
            network=network,
        )
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)


if __name__ == "__main__":
    main()
