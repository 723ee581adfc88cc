"""A discovery run's record in the archive: creating or reopening it (through the shared
lifecycle, `archives.runs`: heartbeat, log, a live run's resume refused), its resumable state
(a `RunState`) and RNG, its clock over sessions, its budgets, and the run columns written with
every candidate, so that a process killed at any instant leaves a state `resume` continues
exactly."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from metarl.archives.runs import RunSession, RunSpec, open_run, raised_time_budget
from metarl.archives.store import Archive, ArchiveError
from metarl.discovery import selection
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.state import RunState
from metarl.errors import MetarlError

logger = logging.getLogger(__name__)


class LoopError(MetarlError):
    """A run that cannot go on (no seed passes, no resumable state...): one line."""


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
    # the options `metarl resume RUN` needs to go on ("" when none): a stopped run's budget
    # raised past what was spent, since budgets count over all of a run's sessions
    resume_options: str = ""


class RunBook:
    """The bookkeeping of one run: `run_id`, `state`, `rng` and the archive's `runs` row.

    Build it with `open` (a new run, or a resume through the shared lifecycle,
    `archives.runs`) and enter its `session` before any work; `proposer` is asked for its
    state whenever the run's state is written.
    """

    def __init__(self, session: RunSession, config: DiscoverConfig, proposer, state: RunState):
        self.session = session
        self.archive = session.archive
        self.config = config
        self.proposer = proposer
        self.run_id = session.run_id
        self.state: RunState = state
        self.rng: np.random.Generator = selection.rng_from_state(state.rng, config.rng_seed)
        self._elapsed_base = float(state.elapsed_s)
        self._session_start = time.monotonic()

    @classmethod
    def open(
        cls,
        archive: Archive,
        config: DiscoverConfig,
        proposer,
        versions: dict,
        device: str,
        resume: str | None = None,
    ) -> "RunBook":
        """A new run, or stored run `resume` taken over (its state, and the proposer's dialogue
        and state, restored once the session is entered: see `restore_proposer`).

        Raises:
            ArchiveError: no such run, or not a discovery run.
            LiveRun: the run is still running in a live process.
            LoopError: the run has no resumable state.
        """
        spec = RunSpec(
            method="discovery",
            task=config.task,
            suite=config.suite,
            config=config.to_dict(),
            config_hash=config.hash(),
            versions=versions,
            device=device,
            proposer=getattr(proposer, "name", config.proposer),
            model=",".join(config.models) or None,
            mode=config.mode,
            rng_seed=config.rng_seed,
            protocol=config.protocol,
            state=RunState().to_dict(),
            changeable={"config": config.to_dict(), **_budgets(config)},
        )
        session = open_run(archive, spec, resume=resume, check=_resumable)
        state = RunState.restore(session.row.get("state")) if resume else RunState()
        return cls(session, config, proposer, state)

    def restore_proposer(self) -> None:
        """Give a resumed run's proposer its dialogue and state back (a new run: nothing)."""
        if not self.session.resumed:
            return
        state = self.state
        pending = state.plan.messages if state.plan is not None else []
        self.proposer.restore_messages([*self.archive.messages(self.run_id), *pending])
        if state.proposer is not None:
            self.proposer.set_state(state.proposer)

    # -- clock and budgets ----------------------------------------------------------------------
    def elapsed(self) -> float:
        """Wall time of the run, summed over its sessions."""
        return self._elapsed_base + (time.monotonic() - self._session_start)

    def check_time(self) -> None:
        """Raises Stop when the time budget is spent (`time_reason`)."""
        reason = self.time_reason()
        if reason:
            raise Stop(reason)

    def time_reason(self) -> str | None:
        """Why the wall-time cap stops the run now, or None.

        The cap (`max_time`, off by default: budgets count candidates) never applies before
        the seed programs and one generation are scored, so that a run on a loaded machine
        still ends with children on its leaderboard rather than with nothing.
        """
        cfg = self.config
        if cfg.max_time is None or self.state.generation < 1:
            return None
        if self.elapsed() < cfg.max_time:
            return None
        generations = self.state.generation
        return (
            f"time budget of {cfg.max_time:g} s spent after {self.elapsed():.0f} s, "
            f"{generations} generation{'s' * (generations != 1)} scored"
        )

    def budget_reason(self) -> str | None:
        """Why no further generation may start, or None."""
        cfg = self.config
        if self.state.planned >= cfg.budget:
            return "candidate budget spent"
        time_reason = self.time_reason()
        if time_reason:
            return time_reason
        if cfg.max_cost is not None and self.state.cost_usd >= cfg.max_cost:
            return f"cost budget of ${cfg.max_cost:g} spent"
        return None

    def resume_options(self, status: str, reason: str) -> str:
        """The options that let `metarl resume` go on after this session ended with `status`
        for `reason`: a spent budget raised past what was spent (the time budget by
        `raised_time_budget`; the cost budget doubled), else none."""
        cfg = self.config
        if status != "stopped":
            return ""
        if cfg.max_time is not None and reason.startswith("time budget"):
            return raised_time_budget(self.elapsed())
        if cfg.max_cost is not None and reason.startswith("cost budget"):
            return f"--max-cost {max(2 * cfg.max_cost, self.state.cost_usd + 1):g}"
        return ""

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

    def finish(self, status: str, reason: str, error: str | None = None) -> bool:
        """Record how this session ended; best effort (the archive stays consistent anyway).

        Returns:
            Whether the run's row was written (not when the archive refuses writes: a full
            disk leaves it saying running, which a resume takes over).
        """
        self.state.elapsed_s = self.elapsed()
        try:
            count = self.archive.child_count(self.run_id)
        except ArchiveError as error:  # every SQLite error arrives as one (archives/faults.py)
            logger.warning("could not count run %s's candidates: %s", self.run_id, error)
            count = None
        fields = {"candidates_count": count} if count is not None else {}
        return self.session.finish(
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
            self.resume_options(status, reason),
        )


def _resumable(run: dict) -> None:
    """Raises LoopError when stored run `run` has no state this version can resume."""
    if RunState.restore(run.get("state")) is None:
        raise LoopError(
            f"run {run['id']} has no resumable state", hint="start a new run with `metarl discover`"
        )


def _budgets(config: DiscoverConfig) -> dict:
    return {
        "budget_candidates": config.budget,
        "max_time_s": config.max_time,
        "max_cost_usd": config.max_cost,
    }
