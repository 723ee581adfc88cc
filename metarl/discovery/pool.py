"""A small pool of daemon threads: work handed to it (an evaluation batch, proposals) never
keeps the process alive after Ctrl-C, and the main thread waits on it while it checks its
budgets (`wait`), so a run stops on time even while a batch is still evaluating."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Callable


class DaemonPool:
    """`size` daemon threads running submitted calls in order; `submit` returns a Future."""

    def __init__(self, size: int, name: str = "metarl-eval"):
        self._queue: queue.Queue = queue.Queue()
        self._threads = []
        for i in range(size):
            thread = threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(error)

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self._queue.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        """Let the threads end after the work already queued; returns at once."""
        for _ in self._threads:
            self._queue.put(None)


def wait(future: Future, check: Callable[[], None], poll_s: float = 0.1) -> None:
    """Return once `future` is done, calling `check()` (which may raise to give up waiting)
    every `poll_s` seconds meanwhile. The future's result or exception is left to the caller."""
    while not future.done():
        check()
        time.sleep(poll_s)
