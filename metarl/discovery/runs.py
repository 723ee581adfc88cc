"""A discovery run's record in the archive: creating or reopening it, its resumable state (a
`RunState`) and RNG, its clock over sessions, its budgets, and the run columns written with every
candidate, so that a process killed at any instant leaves a state `resume` continues exactly."""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import time
from dataclasses import dataclass

import numpy as np

from metarl.archives.store import Archive, ArchiveError, pid_alive
from metarl.discovery import selection
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.state import RunState

logger = logging.getLogger(__name__)


class LoopError(Exception):
    """A run that cannot go on (no seed passes, run still active elsewhere...): one line."""


class Stop(Exception):
    """A budget spent mid-step: the run stops here, resumable."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class RunResult:
    run_id: str
    status: str  # finished | stopped | interrupted | failed
    reason: str
    candidates: int
    best_id: str | None
    best_fitness: float | None


class RunBook:
    """The bookkeeping of one run: `run_id`, `state`, `rng` and the archive's `runs` row.

    Build it with `create` (a new run) or `reopen` (a resume); `proposer` is asked for its state
    whenever the run's state is written.
    """

    def __init__(self, archive: Archive, config: DiscoverConfig, proposer, run_id: str, state):
        self.archive = archive
        self.config = config
        self.proposer = proposer
        self.run_id = run_id
        self.state: RunState = state
        self.rng: np.random.Generator = selection.rng_from_state(state.rng, config.seed)
        self._elapsed_base = float(state.elapsed_s)
        self._session_start = time.monotonic()

    @classmethod
    def create(
        cls, archive: Archive, config: DiscoverConfig, proposer, versions: dict, device: str
    ) -> "RunBook":
        state = RunState()
        run_id = archive.create_run(
            task=config.task,
            suite=config.suite,
            method="discovery",
            proposer=getattr(proposer, "name", config.proposer),
            model=",".join(config.models) or None,
            mode=config.mode,
            seed=config.seed,
            config=config.to_dict(),
            config_hash=config.hash(),
            versions=versions,
            device=device,
            **_budgets(config),
            state=state.to_dict(),
        )
        return cls(archive, config, proposer, run_id, state)

    @classmethod
    def reopen(cls, archive: Archive, run_id: str, config: DiscoverConfig, proposer) -> "RunBook":
        """Take over stored run `run_id`: its state, and the proposer's dialogue and state.

        Raises:
            ArchiveError: no such run.
            LoopError: the run is still running in a live process, or has no resumable state.
        """
        run = archive.get_run(run_id)
        if run["status"] == "running" and run.get("pid") and run.get("pid") != os.getpid():
            if run.get("host") == socket.gethostname() and pid_alive(run["pid"]):
                raise LoopError(
                    f"run {run['id']} is still running (pid {run['pid']}); stop it first"
                )
        state = RunState.restore(run.get("state"))
        if state is None:
            raise LoopError(f"run {run['id']} has no resumable state")
        pending = state.plan.messages if state.plan is not None else []
        proposer.restore_messages([*archive.messages(run["id"]), *pending])
        if state.proposer is not None:
            proposer.set_state(state.proposer)
        archive.update_run(
            run["id"],
            status="running",
            stop_reason=None,
            ended_at=None,
            error=None,
            pid=os.getpid(),
            config=config.to_dict(),
            **_budgets(config),
        )
        return cls(archive, config, proposer, run["id"], state)

    # -- clock and budgets ----------------------------------------------------------------------
    def elapsed(self) -> float:
        """Wall time of the run, summed over its sessions."""
        return self._elapsed_base + (time.monotonic() - self._session_start)

    def check_time(self) -> None:
        """Raises Stop when the time budget is spent."""
        if self.config.max_time is not None and self.elapsed() >= self.config.max_time:
            raise Stop(f"time budget of {self.config.max_time:g} s spent")

    def budget_reason(self) -> str | None:
        """Why no further generation may start, or None."""
        cfg = self.config
        if self.state.planned >= cfg.budget:
            return "candidate budget spent"
        if cfg.max_time is not None and self.elapsed() >= cfg.max_time:
            return f"time budget of {cfg.max_time:g} s spent"
        if cfg.max_cost is not None and self.state.cost_usd >= cfg.max_cost:
            return f"cost budget of ${cfg.max_cost:g} spent"
        return None

    def progress(self) -> dict:
        """The run's counters and budgets, as the live display shows them."""
        state, cfg = self.state, self.config
        return {
            "generation": state.generation,
            "planned": state.planned,
            "done": self.archive.child_count(self.run_id),
            "budget": cfg.budget,
            "elapsed_s": self.elapsed(),
            "max_time": cfg.max_time,
            "cost_usd": state.cost_usd,
            "max_cost": cfg.max_cost,
            "incumbent": state.incumbent,
        }

    # -- writing the run's row ------------------------------------------------------------------
    def update(self) -> dict:
        """The run's columns as of now, its resumable state included (written by the caller,
        with a candidate, in one transaction)."""
        state = self.state
        state.elapsed_s = self.elapsed()
        state.rng = selection.rng_state(self.rng)
        try:
            state.proposer = self.proposer.get_state()
        except Exception:  # plug-in code: a resume then restarts it from its last saved state
            logger.exception("the proposer's get_state failed; keeping its last saved state")
        update = {
            "state": state.to_dict(),
            "elapsed_s": state.elapsed_s,
            "cost_usd": state.cost_usd,
            "generation": state.generation,
        }
        if state.incumbent:
            row = self.archive.candidate(state.incumbent)
            update["best_id"] = state.incumbent
            update["best_fitness"] = selection.score_of(row["fitness"], row["confirmed_fitness"])
        update["candidates_count"] = self.archive.child_count(self.run_id)
        return update

    def save(self) -> None:
        self.archive.update_run(self.run_id, **self.update())

    def finish(self, status: str, reason: str, error: str | None = None) -> None:
        """Record how this session ended; best effort (the archive stays consistent anyway)."""
        self.state.elapsed_s = self.elapsed()
        try:
            count = self.archive.child_count(self.run_id)
        except (sqlite3.Error, ArchiveError):
            logger.exception("could not count run %s's candidates", self.run_id)
            count = None
        fields = {"candidates_count": count} if count is not None else {}
        self.archive.finish_run(
            self.run_id,
            status,
            reason,
            error=error,
            elapsed_s=self.state.elapsed_s,
            state=self.state.to_dict(),
            **fields,
        )

    def result(self, status: str, reason: str) -> RunResult:
        """How the run ended this session, with its counts as archived."""
        run = self.archive.get_run(self.run_id)
        return RunResult(
            self.run_id,
            status,
            reason,
            run["candidates_count"] or 0,
            run.get("best_id"),
            run.get("best_fitness"),
        )


def _budgets(config: DiscoverConfig) -> dict:
    return {
        "budget_candidates": config.budget,
        "max_time_s": config.max_time,
        "max_cost_usd": config.max_cost,
    }
