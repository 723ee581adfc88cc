"""Pre-warmed sandbox workers: a pool keeps `spares` of them importing jax and metarl ahead of
the next job, so a candidate's visible overhead is the hand-off, not the ~3 s import (see
sandbox.py for what one worker is and how it is limited).
"""

from __future__ import annotations

import atexit
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

from metarl.evaluation.sandbox import WorkerProcess
from metarl.evaluation.settings import SandboxLimits


class WorkerPool:
    """Keeps `spares` pre-warmed workers; hands each job a fresh one and starts its replacement.

    Every worker is started from the pool's own spawner thread, which lives as long as the
    pool: bubblewrap's `--die-with-parent` is PR_SET_PDEATHSIG, which fires when the *thread*
    that started the process exits, so a spare started from a short-lived caller thread (a
    thread pool fanning out tracers) would be killed before its job arrives.
    """

    def __init__(
        self,
        limits: SandboxLimits,
        spares: int = 1,
        python: str | None = None,
        role: str = "trainer",
        device: str | None = None,
    ):
        self.limits = limits
        self.role = role
        self.device = device  # every worker of this pool sees only this accelerator
        self.spares = max(0, int(spares))
        self.python = python
        self._lock = threading.Lock()
        self._idle: list[WorkerProcess] = []
        self._closed = False
        self._live: "weakref.WeakSet[WorkerProcess]" = weakref.WeakSet()
        self._spawner = ThreadPoolExecutor(
            1, thread_name_prefix=f"metarl-{role}-{device or 'any'}-spawner"
        )
        reference = weakref.ref(self)

        def close_at_exit() -> None:
            pool = reference()
            if pool is not None:
                pool.close()

        self._at_exit = close_at_exit
        atexit.register(close_at_exit)
        with self._lock:
            self._top_up()

    def _spawn(self) -> WorkerProcess:
        worker = self._spawner.submit(
            WorkerProcess, self.limits, self.python, self.role, self.device
        ).result()
        self._live.add(worker)
        return worker

    def _top_up(self) -> None:
        self._idle = [w for w in self._idle if w.is_alive() or self._discard(w)]
        while not self._closed and len(self._idle) < self.spares:
            self._idle.append(self._spawn())

    @staticmethod
    def _discard(worker: WorkerProcess) -> bool:
        worker.kill()
        return False

    def acquire(self) -> WorkerProcess:
        """A worker for one job (pre-warmed when one is idle); its replacement starts now."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            self._idle = [w for w in self._idle if w.is_alive() or self._discard(w)]
            # prefer the worker that has been warming the longest
            worker = self._idle.pop(0) if self._idle else self._spawn()
            self._top_up()
            return worker

    def close(self) -> None:
        atexit.unregister(self._at_exit)
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()
        for worker in list(self._live):
            worker.kill()
        self._spawner.shutdown(wait=False)
