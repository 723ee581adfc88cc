"""Where the sandboxed workers run: on this machine (optionally one device each), or on the
nodes of a Ray cluster.

The cascade (cascade.py) hands an executor one job at a time (a tracer's `trace` or `sample`, a
trainer's `evaluate` or `baseline`) and gets back the WorkerResult, which it validates and
rescores itself, as it always has. The executor only decides where the sandboxed worker process
is started; the worker (sandbox.py, worker.py: bubblewrap, rlimits, scrubbed environment,
private result pipe) is the same everywhere, so candidate code never runs anywhere else.

- `LocalExecutor`: today's pre-warmed worker pools on this machine. With `devices`, one pool per
  device whose workers see only that device (`CUDA_VISIBLE_DEVICES`), each job holding one free
  device; `slots` (the number of trainer jobs the cascade runs at once, one share of a batch
  each) is the number of devices. Without devices, `trainers` jobs at a time (default one).
- `RayExecutor`: each job is a Ray task (`carry`) that starts the same sandboxed worker on the
  node Ray picks (a GPU when the cluster has them) and returns its WorkerResult; the driver
  keeps the loop, the proposer and the archive and is the only writer of SQLite. A task whose
  worker process or node dies is re-run by Ray (`max_retries`): nothing was archived for it,
  so nothing is archived twice. Ray is imported only when this executor is chosen (the `ray`
  extra). Each Ray worker process keeps a pre-warmed spare sandboxed worker per role, as the
  local pools do; benchmarks/cluster.py measures the remaining overhead per job next to a
  batch's training time.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import socket
import threading
from dataclasses import asdict, dataclass
from typing import Callable, Protocol

from metarl import platform
from metarl.errors import MetarlError
from metarl.evaluation.baseline_cache import compilation_cache_dir
from metarl.evaluation.sandbox import WorkerResult, check_bubblewrap
from metarl.evaluation.settings import SandboxLimits
from metarl.evaluation.worker_pool import WorkerPool

logger = logging.getLogger(__name__)

EXECUTORS = ("local", "ray")
ROLES = ("tracer", "trainer")


class ExecutorError(MetarlError, RuntimeError):
    """The executor could not run a job (a Ray task that failed after its retries, a cluster
    that cannot be reached): an evaluator fault, never a candidate's."""


@dataclass(frozen=True)
class ExecutorSettings:
    """Where workers run. Not part of any evaluation key: a score is the same wherever it was
    computed (tests/test_ray.py checks it).

    Args:
        kind: "local" (this machine) or "ray" (a Ray cluster).
        devices: local only: the accelerators to use, one worker each (CUDA_VISIBLE_DEVICES
            values, e.g. ("0", "1")); empty: today's behaviour (no pinning, one trainer job at
            a time).
        ray_address: ray only: "auto", "HOST:PORT" or "ray://HOST:PORT"; "local": a new
            private Ray instance on this machine; None: Ray's own default (a cluster started
            on this machine with `ray start`, else a new local one).
        retries: ray only: re-runs of a task whose worker process or node died.
        trainers: local without devices: trainer jobs that run at once on this machine's
            cores, the shares a batch is split into (1: one at a time). Why: XLA's CPU backend
            runs one MinAtar trainer on one core (`top` on CPU-2: one worker at 100%, the
            second core idle), so a batch in two shares uses both; a candidate's numbers do not
            depend on its share.
    """

    kind: str = "local"
    devices: tuple[str, ...] = ()
    ray_address: str | None = None
    retries: int = 3
    trainers: int = 1

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise ValueError(f"unknown executor {self.kind!r}; choose {' or '.join(EXECUTORS)}")
        if self.kind != "local" and self.devices:
            raise ValueError("devices pin local workers; a Ray cluster places its own tasks")
        if self.kind != "ray" and self.ray_address:
            raise ValueError("a Ray address needs the ray executor (--executor ray)")
        if len(set(self.devices)) != len(self.devices) or any(not d.strip() for d in self.devices):
            raise ValueError(f"devices must be distinct names, got {list(self.devices)}")
        if self.retries < 0:
            raise ValueError(f"retries must be at least 0, got {self.retries}")
        if self.trainers < 1:
            raise ValueError(f"trainers must be at least 1, got {self.trainers}")
        if self.trainers > 1 and (self.kind != "local" or self.devices):
            raise ValueError(
                "trainers shares a batch over this machine's cores; with devices or a Ray "
                "cluster, the devices or --workers set the shares"
            )


def pinned_devices(devices: list[str] | tuple[str, ...], workers: int) -> tuple[str, ...]:
    """The devices local workers are pinned to: `devices` when given; else, on a CUDA backend
    with several visible GPUs and several workers, the first `workers` of them (one worker
    each); else none (a CPU keeps one unpinned pool, as before)."""
    if devices:
        return tuple(devices)
    gpus = platform.visible_gpus()
    if workers > 1 and len(gpus) > 1:
        return tuple(gpus[:workers])
    return ()


class Executor(Protocol):
    slots: int  # trainer jobs that run at once: the shares a batch is split into

    def run(
        self,
        role: str,
        job: dict,
        limit: float,
        on_event: Callable[[dict], bool | None] | None = None,
    ) -> WorkerResult: ...

    def close(self) -> None: ...


class LocalExecutor:
    """Pre-warmed sandboxed workers on this machine; with `devices`, one pool per device."""

    def __init__(
        self,
        limits: SandboxLimits,
        workers: int,
        prewarm: bool = True,
        devices: tuple[str, ...] = (),
        trainers: int = 1,
    ):
        """Args:
        limits: the sandbox limits of every worker.
        workers: jobs that may run at once (the cascade bounds it); without devices, also
            the spare workers of each role kept warm.
        prewarm: keep spares warm (False: start each worker when its job comes).
        devices: accelerators to pin workers to, one job per device at a time.
        trainers: without devices, the trainer jobs that run at once (ExecutorSettings).
        """
        self.devices = list(devices)
        self.slots = max(1, len(self.devices)) if self.devices else max(1, int(trainers))
        self._free: queue.Queue = queue.Queue()
        for device in self.devices or [None]:
            self._free.put(device)
        spares = (1 if self.devices else max(1, workers)) if prewarm else 0
        # one more tracer-type spare with prewarm: a batch's artifact pre-check runs in a fresh
        # tracer-type worker right after the traces (evaluation/artifact_precheck.py); without
        # it the pre-check waited for a spare's start-up (measured 2.6-2.9 s of a 12 s demo
        # candidate, CPU-2), with it ~0.1-0.2 s
        extra = {"tracer": 1 if prewarm else 0}
        self._pools = {
            (role, device): WorkerPool(
                limits, spares=spares + extra.get(role, 0), role=role, device=device
            )
            for role in ROLES
            for device in self.devices or [None]
        }

    def pool(self, role: str, device: str | None = None) -> WorkerPool:
        """The pool of `role` workers (of `device`, with devices)."""
        return self._pools[(role, device)]

    def run(self, role, job, limit, on_event=None) -> WorkerResult:
        """Run `job` in a fresh `role` worker; with devices, on the next free device."""
        device = self._free.get() if self.devices else None
        try:
            return self._pools[(role, device)].acquire().run(job, limit, on_event)
        finally:
            if self.devices:
                self._free.put(device)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()


# A Ray worker process is reused for many tasks: it keeps one pre-warmed spare sandboxed
# worker per role and limits, as the local pools do, so a task rarely waits for the ~3 s of
# imports. A spare has seen no job; each job still gets a fresh worker, killed after it.
_NODE_POOLS: dict[tuple[str, str], WorkerPool] = {}
_NODE_POOLS_LOCK = threading.Lock()


def _node_pool(role: str, limits: SandboxLimits) -> WorkerPool:
    key = (role, json.dumps(asdict(limits), sort_keys=True))
    with _NODE_POOLS_LOCK:
        if key not in _NODE_POOLS:
            _NODE_POOLS[key] = WorkerPool(limits, spares=1, role=role)
        return _NODE_POOLS[key]


def carry(role: str, job: dict, limits: SandboxLimits, limit: float) -> dict:
    """On a Ray node: run one job in a sandboxed worker started there (a pre-warmed spare of
    this Ray worker process when one is ready), and return its WorkerResult as a dict. The
    node's own compilation cache replaces the driver's path; the sandbox is checked on the node
    (a node without bubblewrap refuses, unless the run opted out of the sandbox).

    Raises:
        SandboxUnavailable: bubblewrap cannot run on this node.
    """
    if not limits.unsafe_no_sandbox:
        check_bubblewrap()
    if limits.compilation_cache:
        limits = dataclasses.replace(limits, compilation_cache=str(compilation_cache_dir()))
    return asdict(_node_pool(role, limits).acquire().run(job, limit))


class RayExecutor:
    """Each job a Ray task on the cluster at `address`: the same sandboxed worker, on a node."""

    def __init__(
        self, limits: SandboxLimits, workers: int, address: str | None = None, retries: int = 3
    ):
        """Args:
        limits: the sandbox limits of every worker.
        workers: trainer jobs that run at once (the shares a batch is split into).
        address: the cluster (see ExecutorSettings.ray_address).
        retries: re-runs of a task whose worker process or node died.

        Raises:
            ExecutorError: Ray is not installed, or the cluster cannot be reached.
        """
        ray = connect_ray(address)
        self.ray = ray
        self.limits = limits
        self.retries = int(retries)
        self.slots = max(1, int(workers))
        gpus = ray.cluster_resources().get("GPU", 0)
        self.task = ray.remote(carry).options(
            num_cpus=1,
            num_gpus=1 if gpus else 0,
            max_retries=self.retries,
            retry_exceptions=False,  # a candidate's failure is a result, not a crash
        )
        logger.info(
            "ray executor: %s, %s CPUs, %s GPUs, %d tasks at once, %d retries",
            address or "default address",
            ray.cluster_resources().get("CPU", 0),
            gpus,
            self.slots,
            self.retries,
        )

    def run(self, role, job, limit, on_event=None) -> WorkerResult:
        """Run `job` as a Ray task and wait for it; the worker's progress events are replayed to
        `on_event` when its result arrives (a Ray task does not stream).

        Raises:
            ExecutorError: the task failed after its retries (its node or process kept dying,
                or the node has no sandbox).
        """
        ref = self.task.remote(role, job, self.limits, limit)
        while True:  # short waits, so that Ctrl-C on the driver is seen
            ready, _ = self.ray.wait([ref], timeout=0.5)
            if ready:
                break
        try:
            data = self.ray.get(ref)
        except self.ray.exceptions.RayError as error:
            raise ExecutorError(
                f"a Ray task failed after {self.retries} retries: {str(error).splitlines()[0]}"
            ) from None
        result = WorkerResult(**data)
        if on_event is not None:
            for message in result.events:
                if message.get("event") != "result":
                    on_event(message)
        return result

    def close(self) -> None:
        """Nothing to stop: the cluster keeps running, and this driver stays connected for the
        run's other evaluators (Ray disconnects it when the process exits)."""
        logger.info("ray executor closed")


def _reachable(address: str, timeout_s: float = 3.0) -> bool:
    """Whether something listens at a HOST:PORT address (a Ray head's GCS port)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def connect_ray(address: str | None):
    """This process connected to the Ray cluster at `address` (once; later calls reuse the
    connection); the `ray` module.

    A HOST:PORT address is tried with a plain TCP connection first: `ray.init` itself waits
    for an unreachable head without end.

    Raises:
        ExecutorError: Ray is not installed, or no cluster answers at `address`.
    """
    try:
        # lazy: Ray is the `ray` extra, imported only when this executor is chosen
        import ray
    except ImportError:
        raise ExecutorError(
            "the ray executor needs Ray", hint='pip install "metarl[ray]"'
        ) from None
    if ray.is_initialized():
        return ray
    hint = "start one with `ray start --head`, or pass --ray-address HOST:PORT"
    if address and address not in ("auto", "local") and not _reachable(address):
        raise ExecutorError(f"no Ray cluster answers at {address}", hint=hint)
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")  # the driver's C++ core: errors only
    try:
        ray.init(
            address=address,
            namespace="metarl",
            log_to_driver=False,
            logging_level=logging.WARNING,
            include_dashboard=False,
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise ExecutorError(
            f"cannot reach a Ray cluster at {address or 'this machine'}: {error}", hint=hint
        ) from None
    return ray


def make_executor(
    settings: ExecutorSettings, limits: SandboxLimits, workers: int, prewarm: bool = True
) -> Executor:
    """The executor `settings` ask for.

    Raises:
        ExecutorError: the ray executor without Ray, or without a reachable cluster.
        SandboxUnavailable: the local executor where bubblewrap cannot run (and the sandbox
            was not opted out of).
    """
    if settings.kind == "ray":
        return RayExecutor(limits, workers, settings.ray_address, settings.retries)
    if not limits.unsafe_no_sandbox:
        check_bubblewrap()
    return LocalExecutor(limits, workers, prewarm, settings.devices, settings.trainers)
