"""The sandbox worker: `python -m metarl.evaluators.worker --result-fd N ...`.

Started by metarl.evaluators.sandbox in its own session and temp dir. In order:

1. isolates itself from the network (`unshare(CLONE_NEWNET)`, or socket stubs as a fallback),
   and sets its resource limits (address space, CPU time, file size, open files, no core);
2. imports jax, gymnax and metarl and initialises XLA (pre-warming), then writes `ready` on the
   private result pipe;
3. reads exactly one job (a JSON line) from stdin, runs it, writing progress messages and one
   final `result` message on the pipe, and exits. The parent kills its process group anyway.

The candidate runs in this process, so nothing here trusts it: limits are set before its code
is loaded; its prints go to stdout/stderr, which are files the parent truncates, never the pipe.
Stages here are 2-4 of the cascade (probes, short run, full run); stage 1 ran in the parent.
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


# --- the job ------------------------------------------------------------------------------------
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
        exec(code, namespace)  # noqa: S102 - restricted namespace, sandboxed process
    except Exception as error:
        raise StageFailure(describe_exception(error, "defining the candidate (running the module's top level)")) from error
    function = namespace.get(function_name)
    if not callable(function):
        raise StageFailure(f"the candidate does not define a function `{function_name}`")
    return function


def cache_root():
    from pathlib import Path

    from metarl.evaluators.baseline_cache import cache_dir

    return Path(cache_dir()).parent


def random_return(env_name: str) -> float:
    """The random policy's mean return, cached on disk next to the baselines."""
    import hashlib

    from metarl.evaluators.baseline_cache import library_versions
    from metarl.evaluators.scoring import random_policy_return

    key = hashlib.sha256(json.dumps([env_name, library_versions()], sort_keys=True).encode()).hexdigest()[:16]
    path = cache_root() / "random" / f"{env_name}-{key}.json"
    try:
        return float(json.loads(path.read_text())["return"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = random_policy_return(env_name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"env": env_name, "return": value}))
        os.replace(tmp, path)
    except OSError:
        pass
    return value


class Job:
    """Stages 2-4 for one candidate (or the baseline alone), reporting on the channel."""

    def __init__(self, job: dict, channel: Channel):
        from metarl.evaluators.suites import get_suite
        from metarl.tasks import get_task

        self.job = job
        self.channel = channel
        self.settings = job["settings"]
        self.task = get_task(job["task"])
        self.suite = get_suite(self.settings["suite"])
        self.seeds = list(range(int(self.settings["seeds"])))
        chosen = self.settings.get("envs")
        self.envs = [e for e in (chosen or self.suite.envs) if e in self.suite.envs]
        self.heldout_envs = [e for e in self.suite.heldout if chosen is None or e in chosen]
        self.timings: dict[str, float] = {}
        self.warnings: list[str] = []
        self.stage = "probes"
        self.stage_started: float | None = None
        self.candidate_hash = None

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

    # configs
    def full_config(self, env: str):
        return self.suite.config(env, self.settings.get("total_timesteps"))

    def short_config(self):
        env = self.envs[0]
        full = self.full_config(env)
        short = self.settings.get("short_timesteps") or self.suite.short_budget
        return self.suite.config(env, min(int(short), full.total_timesteps))

    # baselines and scores
    def baseline(self, config, candidate_run=None):
        from metarl.evaluators import baseline_cache
        from metarl.tasks.candidate import source_hash

        start = time.perf_counter()
        seed = self.task.baseline()
        key = baseline_cache.baseline_key(self.task.name, source_hash(seed.source), config, self.seeds)
        run = baseline_cache.load(key)
        if run is None and candidate_run is not None and self.candidate_hash == source_hash(seed.source):
            # the candidate *is* the baseline seed: same program, config and seeds, same run
            baseline_cache.save(key, candidate_run)
            run = candidate_run
        if run is None:
            run, _ = baseline_cache.get_or_train(self.task, config, self.seeds)
        self.add_time("baseline", time.perf_counter() - start)
        return run

    def random(self, env: str) -> float:
        start = time.perf_counter()
        value = random_return(env)
        self.add_time("random_return", time.perf_counter() - start)
        return value

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
                f"{config.num_updates} on {config.env_name} (seed {run.nonfinite_seed}): the loss "
                "or the parameters stopped being finite"
            )
        return run

    def score(self, run, baseline, random_mean: float, heldout: bool, stage: str):
        from metarl.evaluators.outcome import EnvScore
        from metarl.evaluators.scoring import normalised_score

        import math

        normalised = normalised_score(run.mean, random_mean, baseline.mean)
        return EnvScore(
            env=run.env,
            seeds=list(run.seeds),
            total_timesteps=run.total_timesteps,
            returns=list(run.final_returns),
            mean=run.mean,
            std=run.std,
            normalised=normalised if math.isfinite(normalised) else None,
            baseline_mean=baseline.mean,
            random_mean=random_mean,
            curve_steps=list(run.curve_steps),
            curve=list(run.curve),
            compile_s=run.compile_s,
            run_s=run.run_s,
            steps_per_s=run.steps_per_s,
            heldout=heldout,
            stage=stage,
        )

    # the cascade, stages 2-4
    def evaluate(self) -> dict:
        from metarl.evaluators.outcome import Outcome
        from metarl.evaluators.scoring import aggregate
        from metarl.tasks.candidate import source_hash
        from metarl.tasks.probing import fingerprint

        source = self.job["source"]
        self.candidate_hash = source_hash(source)
        outcome = Outcome(passed=False, stage="probes")
        try:
            # stage 2: probes
            self.announce("probes")
            function = load_candidate(source, self.task.function_name)
            if self.task.probes is not None:
                report = self.task.probes(function, int(self.job.get("probe_seed", 0)))
                self.warnings.extend(report.warnings)
                if not report.ok:
                    raise StageFailure(report.reason)
            if self.task.fingerprint_inputs is not None:
                try:
                    outcome.fingerprint = fingerprint(function, self.task.fingerprint_inputs())
                except Exception as error:  # ProbeFailure and the like
                    raise StageFailure(str(error)) from error
                self.channel.send("fingerprint", fingerprint=outcome.fingerprint)

            # stage 3: short run on the first environment
            settings = self.settings
            reused = None
            if not settings.get("skip_short"):
                self.announce("short")
                config = self.short_config()
                run = self.train(function, config)
                baseline = self.baseline(config, run)
                score = self.score(run, baseline, self.random(config.env_name), False, "short")
                outcome.env_scores.append(score)
                threshold = float(settings.get("short_run_threshold", 0.25))
                if score.normalised is None:
                    self.warnings.append(
                        f"short run: the normalised score on {config.env_name} is undefined (the "
                        "baseline is no better than a random policy at this budget); not filtered"
                    )
                elif score.normalised < threshold:
                    raise StageFailure(
                        f"short run: normalised score {score.normalised:.3f} on {config.env_name} "
                        f"after {config.total_timesteps} steps (mean return {score.mean:.4g}; random "
                        f"policy {score.random_mean:.4g} = 0, baseline {self.task.baseline_seed} "
                        f"{score.baseline_mean:.4g} = 1) is below the threshold {threshold:g}"
                    )
                if config == self.full_config(config.env_name):
                    reused = (config, score)

            # stage 4: full run on every environment of the suite
            self.announce("full")
            envs = [(env, False) for env in self.envs]
            if settings.get("heldout", True):
                envs += [(env, True) for env in self.heldout_envs]
            for env, heldout in envs:
                config = self.full_config(env)
                if reused is not None and reused[0] == config and not heldout:
                    reused[1].stage = "full"  # the short run was this very run
                    continue
                run = self.train(function, config)
                baseline = self.baseline(config, run)
                outcome.env_scores.append(self.score(run, baseline, self.random(env), heldout, "full"))
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
            from metarl.tasks.probing import describe_exception

            outcome.passed = False
            outcome.stage = self.stage
            outcome.reason = describe_exception(error, f"running stage {self.stage}")
        self.announce(None)
        outcome.warnings = self.warnings
        outcome.timings = self.timings
        return outcome.to_dict()

    def baselines(self) -> dict:
        runs = {}
        envs = self.envs + (self.heldout_envs if self.settings.get("heldout", True) else [])
        self.announce("full")
        for env in envs:
            config = self.full_config(env)
            run = self.baseline(config)
            data = run.to_dict()
            data["random_mean"] = self.random(env)
            runs[env] = data
        self.announce(None)
        return {"baselines": runs, "timings": self.timings}


def introspect() -> dict:
    """What the sandbox looks like from inside (trusted diagnostic job, used by tests/doctor)."""
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
    return {
        "env": sorted(os.environ),
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "connect": network,
        "rlimits": limits,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
    }


# The training stack (gymnax pulls in matplotlib, seaborn and scipy: ~1.6 s of the ~3 s import)
# is imported after `ready`, one module at a time, for as long as no job is waiting. A spare
# worker that waits long enough is fully warm; a job that arrives early starts at once and
# imports only what it uses (most failing candidates never reach training).
PRELOAD = (
    "optax",
    "flax.linen",
    "gymnax",
    "metarl.evaluators.environments",
    "metarl.evaluators.ppo",
    "metarl.evaluators.training",
    "metarl.evaluators.scoring",
    "metarl.evaluators.baseline_cache",
)


def preload_until_job() -> float:
    import importlib
    import select

    start = time.perf_counter()
    for module in PRELOAD:
        waiting, _, _ = select.select([sys.stdin], [], [], 0)
        if waiting:
            break
        importlib.import_module(module)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m metarl.evaluators.worker")
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
    network = isolate_network()
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
    )
    preload_s = preload_until_job()

    line = sys.stdin.buffer.readline()
    if not line.strip():
        abandon(0)  # the pool was closed, or the parent died: nothing to do
    sys.stdin.close()
    job = json.loads(line)
    job_start = time.perf_counter()

    try:
        if job.get("kind") == "introspect":
            payload = introspect()
        elif job.get("kind") == "baseline":
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
            payload={"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-4000:]},
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
