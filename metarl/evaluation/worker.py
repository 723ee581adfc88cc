"""The sandbox worker: `python -m metarl.evaluation.worker --role tracer|trainer ...`.

Started by metarl.evaluation.sandbox inside bubblewrap (see there). In order:

1. sets its resource limits (address space, CPU time, file size, open files, processes and
   threads, no POSIX message queues, no core); outside bubblewrap (the explicit opt-out only)
   also isolates itself from the network;
2. imports jax and metarl and initialises XLA (pre-warming), then writes `ready` on the private
   result pipe, and goes on importing what its role needs until a job arrives;
3. reads exactly one job (a JSON line) from stdin, runs it, writing progress messages and one
   final `result` message on the pipe, and exits. The parent kills its process group anyway.

Two roles, never mixed in one process:
- **tracer**: the only process that runs candidate Python. It loads the candidate, runs the
  task's probes on it (detailed, friendly reasons for the proposer) and exports it per element
  (rl/verifier/artifact.py), or samples a drift candidate on the distillation grid (job kind
  `sample`). Once candidate code has run, the process is the candidate's: the
  parent treats everything it sends (the artifact, the reason, its output) as untrusted data.
  A fresh tracer-type worker also parses a generation's artifacts before any trainer does
  (job kind `check_artifacts`, evaluation/artifact_precheck.py): that job runs no candidate
  Python, and the worker has no cache and no device.
- **trainer**: trusted code only. It verifies the artifact, probes it again on inputs the
  tracer never saw, computes the fingerprint, and trains and scores it (stages 2-4); or trains
  the task's baseline program for the parent's cache; or trains agents with an LPG network,
  a data candidate (job kind `lpg`), under the same limits.
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

from metarl.platform import cuda_plugin_installed  # stdlib only: safe before the rlimits

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
    for name in (
        "create_connection",
        "create_server",
        "getaddrinfo",
        "gethostbyname",
        "socketpair",
        "fromfd",
    ):
        if hasattr(socket, name):
            setattr(socket, name, refuse)


def set_limits(memory_mb: int, cpu_s: int, max_file_mb: int, nofile: int, nproc: int = 0) -> dict:
    """Apply the worker's rlimits to itself (inherited by everything it starts).

    Args:
        memory_mb: RLIMIT_AS in MB (skipped with a CUDA plugin); 0: none.
        cpu_s: RLIMIT_CPU in seconds; 0: none.
        max_file_mb: RLIMIT_FSIZE in MB.
        nofile: RLIMIT_NOFILE.
        nproc: RLIMIT_NPROC (processes and threads of the sandbox's uid in its own user
            namespace; os_limits.py says where the kernel enforces it); 0: none.

    Returns:
        rlimit name -> the value set, or why not.
    """
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

    if memory_mb > 0 and not cuda_plugin_installed():
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
    if nproc > 0:
        limit("RLIMIT_NPROC", nproc)
    limit("RLIMIT_MSGQUEUE", 0)  # POSIX message queues: kernel memory that no mount bounds
    limit("RLIMIT_CORE", 0)
    return applied


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
        # lazy: nothing of metarl before the rlimits (see main); imported by then anyway
        from metarl.evaluation.outcome import _finite_or_none

        line = (json.dumps(_finite_or_none({"event": event, **data})) + "\n").encode()
        with self.lock:
            view = memoryview(line)
            while view:
                written = os.write(self.fd, view)
                view = view[written:]


# The training stack (gymnax pulls in matplotlib, seaborn and scipy: ~1.6 s of the ~3 s import)
# is imported after `ready`, one module at a time, for as long as no job is waiting. A spare
# worker that waits long enough is fully warm; a job that arrives early starts at once and
# imports only what it uses (most failing candidates never reach training).
PRELOAD = (
    "optax",
    "flax.linen",
    "gymnax",
    "metarl.rl.environments.registry",
    "metarl.rl.ppo",
    "metarl.rl.training",
    "metarl.rl.verifier.artifact",
    "metarl.evaluation.stages",
)


# the jobs that run candidate Python: only a tracer runs them, and a tracer runs nothing else
# but them and the artifact check (which runs no candidate Python, in a fresh worker)
TRACER_KINDS = ("trace", "sample")
CHECK_KIND = "check_artifacts"


def run(job: dict, report) -> dict:
    """Run one job from the parent with the stage functions; its JSON-ready payload."""
    # lazy: the worker imports nothing of metarl before its rlimits are set (see main)
    from metarl.evaluation import stages, tracing
    from metarl.evaluation.settings import CascadeSettings
    from metarl.tasks import get_task

    kind = job.get("kind")
    if kind == "introspect":
        return stages.introspect()
    if kind == "train-lpg":  # an LPG network: data trained by metarl's code (lpg_evaluation.py)
        # lazy: as above, nothing of metarl before the rlimits
        from metarl.evaluation.lpg_evaluation import train_lpg_job

        return train_lpg_job(job, report)
    task = get_task(job["task"])
    if kind == CHECK_KIND:
        # lazy: as above, nothing of metarl before the rlimits
        from metarl.evaluation.artifact_precheck import check_in_worker

        return check_in_worker(task, job["artifacts"], job["platform"])
    if kind == "trace":
        return tracing.trace_candidate(
            task, job["source"], int(job.get("probe_seed", 0)), job["platform"]
        ).to_dict()
    if kind == "sample":
        return tracing.sample_candidate(
            task, job["source"], int(job["points"]), float(job["epsilon"])
        )
    settings = CascadeSettings(**job["settings"])
    if kind == "baseline":
        return stages.train_baselines(
            task, settings, job["keys"], job["platform"], report
        ).to_dict()
    references = {r["key"]: r for r in job.get("references", [])}
    if job.get("control") is True:  # the parent's control: the baseline program, no candidate
        # lazy: as above, nothing of metarl before the rlimits
        from metarl.evaluation.preflight import baseline_artifact

        job.update(artifacts=[baseline_artifact(task, job["platform"])], probe_seeds=[0])
    # lazy: as above, nothing of metarl before the rlimits
    from metarl.evaluation.settings import run_configs
    from metarl.tasks import behaviour

    configs, n_seeds = run_configs(settings), len(settings.training_seeds())
    for config, sizes in zip(configs, job.get("call_sizes") or []):
        if sizes:  # traced by an earlier job on this machine and code (the parent's cache)
            behaviour.remember_sizes(task, config, n_seeds, sizes)
    outcomes = stages.evaluate_artifacts(
        task,
        job["artifacts"],
        settings,
        references,
        [int(seed) for seed in job["probe_seeds"]],
        job["platform"],
        job.get("known_fingerprints") or {},
        report,
        isolate=job.get("isolate") is True,
        known_behaviours=job.get("known_behaviours") or {},
        train=job.get("train") is not False,
    )
    return {
        "outcomes": [outcome.to_dict() for outcome in outcomes],
        "call_sizes": [behaviour.traced_sizes(task, config, n_seeds) for config in configs],
    }


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
    parser = argparse.ArgumentParser(prog="python -m metarl.evaluation.worker")
    parser.add_argument("--role", choices=("tracer", "trainer"), default="trainer")
    parser.add_argument("--sandboxed", action="store_true", help="started inside bubblewrap")
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--cpu-s", type=int, required=True)
    parser.add_argument("--max-file-mb", type=int, required=True)
    parser.add_argument("--nofile", type=int, required=True)
    parser.add_argument("--nproc", type=int, default=0)
    args = parser.parse_args(argv)

    # Python ignores SIGXFSZ; restore the default so that writing past RLIMIT_FSIZE (a candidate
    # printing without end) ends the worker, which the parent reports as an output-limit failure.
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    # inside bubblewrap the network namespace is already empty (and unshare is not permitted)
    network = "netns" if args.sandboxed else isolate_network()
    limits = set_limits(args.memory_mb, args.cpu_s, args.max_file_mb, args.nofile, args.nproc)
    watch_parent()
    channel = Channel(args.result_fd)

    import_start = time.perf_counter()
    # lazy: the imports start only now, under the rlimits set above
    import jax
    import jax.numpy as jnp

    # lazy: as above. metarl sets XLA_FLAGS, read when the backend initialises (just below);
    # then the task registry and probing helpers every job needs
    import metarl  # noqa: F401
    import metarl.tasks.probing  # noqa: F401
    from metarl.tasks import get_task, task_names

    for name in task_names():  # the registry imports a task's package on first use only
        get_task(name)

    cache = os.environ.get("METARL_XLA_CACHE")
    if cache and args.role == "trainer":  # a tracer never gets one (sandbox.py)
        jax.config.update("jax_compilation_cache_dir", cache)
        # every program, however fast it compiled: JAX's default keeps only compiles over 1 s,
        # so whether a program was cached depended on the machine's load at the time (measured:
        # a busy run re-committed a program a quiet one had skipped)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
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
    preload_s = preload_until_job()

    line = sys.stdin.buffer.readline()
    if not line.strip():
        abandon(0)  # the pool was closed, or the parent died: nothing to do
    sys.stdin.close()
    job = json.loads(line)
    job_start = time.perf_counter()

    try:
        kind = job.get("kind")
        tracer_kind = kind in TRACER_KINDS or kind == CHECK_KIND
        if tracer_kind != (args.role == "tracer") and kind != "introspect":
            raise ValueError(f"a {args.role} does not run {kind!r} jobs")
        payload = run(job, channel.send)
        if kind == "evaluate":
            payload["timings"] = {
                "preload": preload_s,
                "worker_job": time.perf_counter() - job_start,
            }
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
