"""The loop's evaluators and the batches it sends them.

One evaluator per purpose ("child", "seed", "confirm", "stability", "final"; settings from
records.cascade_settings), started on first use. A batch is one `evaluate_batch` call, run on
a daemon thread while the loop's thread checks the time budget (and stays responsive to
Ctrl-C); `workers` is the
evaluator's own concurrency. An evaluator fault, not a candidate's, fails every candidate of the
batch with its reason, which is archived like any other failure.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any, Callable

from metarl.discovery import records
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.pool import DaemonPool, wait
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.outcome import Outcome

logger = logging.getLogger(__name__)

# the `submitted` event's fields for each purpose (confirmations are announced by a status line)
SHOWN = {
    "child": ("id", "name", "operator"),
    "seed": ("id", "name"),
    "confirm": (),
    "stability": (),
    "final": (),
}


def evaluator_factory(config: DiscoverConfig) -> Callable[[Any, int], Evaluator]:
    """Evaluators whose workers run where the run's config says (records.executor_settings)."""
    executor = records.executor_settings(config)
    return lambda settings, workers: Evaluator(settings, workers=workers, executor=executor)


class Batches:
    """Evaluates batches of candidate rows for one run.

    `factory(settings, workers)` builds an evaluator (`evaluate_batch`, `close`); `check()`
    raises to give up waiting (the time budget); `emit(kind, data)` feeds the live display.
    """

    def __init__(
        self,
        config: DiscoverConfig,
        task: str,
        factory: Callable[[Any, int], Any] | None,
        check: Callable[[], None],
        emit: Callable[[str, dict], None],
    ):
        self.config = config
        self.task = task
        self.factory = factory or evaluator_factory(config)
        self.check = check
        self.emit = emit
        self.evaluators: dict[str, Any] = {}
        self.pool = DaemonPool(1)
        self.seed_pool: list[int] | None = None  # the run's secret training-seed pool

    def evaluator(
        self,
        purpose: str,
        final_rate: tuple[str | None, float] = (None, 1.0),
        train_envs: list[str] | None = None,
    ):
        """The evaluator of `purpose` (started on first use); a "final" one per learning rate
        (`records.cascade_settings`' `final_rate`); a "child" one per curriculum draw
        (`train_envs`: the previous draw's evaluator is closed first)."""
        name = purpose if final_rate == (None, 1.0) else f"{purpose}@{final_rate!r}"
        if train_envs:
            name = f"{purpose}#{'|'.join(train_envs)}"
            for old in [n for n in self.evaluators if n.startswith(f"{purpose}#") and n != name]:
                self.evaluators.pop(old).close()
        if name not in self.evaluators:
            if purpose == "child":
                self.emit("status", {"text": "starting sandbox workers"})
            workers = 1 if purpose in ("confirm", "stability", "final") else self.config.workers
            settings = records.cascade_settings(
                self.config, purpose, self.seed_pool, final_rate, train_envs
            )
            self.evaluators[name] = self.factory(settings, workers)
        return self.evaluators[name]

    def evaluate(
        self,
        purpose: str,
        rows: list[dict],
        known: dict[str, str] | None = None,
        exclude_seeds: list[int] | None = None,
        seeds: list[int] | None = None,
        final_rate: tuple[str | None, float] = (None, 1.0),
        train_envs: list[str] | None = None,
        behaviours: dict[str, list] | None = None,
    ) -> list[Outcome]:
        """The Outcomes of the programs (`code`) of candidate rows `rows`, in order, in one
        batch; `known` maps behaviour fingerprints to the candidates that have them;
        `exclude_seeds`: training seeds the batch must not draw (a confirmation's);
        `seeds`: the batch's training seeds, when they are not drawn (a race round that pairs
        the challenger with a round of the incumbent's);
        `final_rate`: the learning rate of a "final" measurement (`records.cascade_settings`);
        `train_envs`: a curriculum's draw (the training envs of a "child" batch);
        `behaviours`: candidate id -> behaviour descriptor, for near-duplicates (passed to
        the evaluator only when there are some: an evaluator without them needs no such
        argument)."""
        if not rows:
            return []
        self.check()
        evaluator = self.evaluator(purpose, final_rate, train_envs)
        for row in rows if SHOWN[purpose] else []:
            self.emit("submitted", {k: row[k] for k in SHOWN[purpose]})
        sources = [row["code"] for row in rows]

        def progress(index: int, stage: str) -> None:  # from the evaluator's thread
            self.emit("stage", {"id": rows[index]["id"], "stage": stage})

        evaluate = functools.partial(
            evaluator.evaluate_batch, exclude_seeds=list(exclude_seeds or []), progress=progress
        )
        if behaviours:
            evaluate = functools.partial(evaluate, known_behaviours=behaviours)
        if seeds is not None:
            evaluate = functools.partial(evaluate, seeds=list(seeds))
        future = self.pool.submit(evaluate, sources, self.task, known)
        wait(future, self.check)
        try:
            outcomes = list(future.result())
            if len(outcomes) != len(rows):
                raise RuntimeError(f"{len(outcomes)} outcomes for a batch of {len(rows)}")
        except Exception as error:  # the evaluator itself failed: archive the reason
            logger.exception("the %s evaluator failed on a batch of %d", purpose, len(rows))
            reason = f"the evaluator failed: {type(error).__name__}: {error}"
            return [Outcome.evaluator_fault(reason, "full") for _ in rows]
        return outcomes

    def close(self, purpose: str | None = None) -> None:
        """Close the evaluator of `purpose` (all of them, and the pool, when None)."""
        if purpose is None:
            self.pool.shutdown()
        names = (
            [n for n in self.evaluators if re.split("[@#]", n)[0] == purpose] if purpose else None
        )
        for name in names if purpose else list(self.evaluators):
            evaluator = self.evaluators.pop(name, None)
            if evaluator is None:
                continue
            try:
                evaluator.close()
            except OSError:  # its workers are killed at exit anyway
                logger.exception("closing the %s evaluator failed", name)
