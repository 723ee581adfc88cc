"""The discovery loop (population mode; conversation mode is the special case of one island and
one child per generation).

    seeds (evaluated once per archive, then cached)
    repeat until a budget is spent:
        plan a generation: pick parents per child slot (islands, fitness + novelty tournaments)
        ask the proposer for each child; deduplicate by normalised source (re-ask a few times)
        evaluate the children through the sandboxed cascade, `workers` at a time
            (the cascade also rejects behavioural duplicates by fingerprint)
        archive each child as it finishes: candidate + evaluations + LLM calls + messages +
            the run's state, in one transaction
        end of generation: children join their islands; a child that beats the incumbent is
            re-evaluated on more seeds before it may displace it; truncation; migration

Exact resume. The run's `state` (in `runs.state`) holds the generation counter, the islands,
the numpy RNG state, the proposer's state, the budget spent, and the current generation's
*plan*: every child slot with its parents, RNG seed, pre-assigned candidate id and proposal.
A plan is written before any of its children is evaluated, so a process killed at any instant
resumes by evaluating the plan's slots that have no archived candidate yet (only in-flight
evaluations are lost: their time, never their proposals), and then carries on with the same
RNG state, hence the same parents and programs an uninterrupted run would have produced. The
generation's end is computed from archived rows in slot order, never from completion order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from metarl.archives.store import Archive, ArchiveError, decode_outcome, now, pid_alive
from metarl.discovery import selection
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.proposers.base import LLMCall, ParentInfo, Proposal, ProposalRequest
from metarl.evaluation.cascade import CascadeSettings, Evaluator
from metarl.evaluation.outcome import Outcome
from metarl.platform import device_description, library_versions
from metarl.rl.suites import get_suite
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash

STATE_VERSION = 1
Event = Callable[[str, dict], None]


class LoopError(Exception):
    """A run that cannot go on (no seed passes, run still active elsewhere...): one line."""


class _Stop(Exception):
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


def eval_settings_key(task: str, settings: Any, versions: dict, device: str) -> str:
    """Everything that determines an evaluation's scores; equal keys may share results."""
    fields = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)
    for volatile in ("timeout_s", "memory_mb"):
        fields.pop(volatile, None)
    blob = json.dumps(
        {"task": task, "settings": fields, "versions": versions, "device": device},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def suite_config_hash(suite_name: str, timesteps: int | None) -> str:

    suite = get_suite(suite_name)
    hashes = [suite.config(env, timesteps).config_hash() for env in (*suite.envs, *suite.heldout)]
    return hashlib.sha256("|".join(hashes).encode()).hexdigest()[:16]


# -- a daemon thread pool (evaluations must never keep the process alive after Ctrl-C) ---------


class _DaemonPool:
    def __init__(self, size: int):
        self._queue: queue.Queue = queue.Queue()
        self._threads = []
        for i in range(size):
            thread = threading.Thread(target=self._work, name=f"metarl-eval-{i}", daemon=True)
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
            except BaseException as error:  # noqa: BLE001 - handed to the main thread
                future.set_exception(error)

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self._queue.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)


def _proposal_to_dict(proposal: Proposal) -> dict:
    return dataclasses.asdict(proposal)


def _proposal_from_dict(data: dict) -> Proposal:
    data = dict(data)
    data["calls"] = [LLMCall(**c) for c in data.get("calls", [])]
    return Proposal(**data)


def _call_record(call: LLMCall) -> dict:
    return {
        "model": call.model,
        "prompt": call.prompt,
        "reply": call.reply,
        "prompt_tokens": call.prompt_tokens,
        "completion_tokens": call.completion_tokens,
        "cost_usd": call.cost_usd,
        "latency_s": call.latency_s,
        "error": call.error,
    }


def _default_evaluator_factory(settings, workers):

    return Evaluator(settings, workers=workers)


def _settings(config: DiscoverConfig, *, seeds: int, heldout: bool, skip_short: bool):

    return CascadeSettings(
        suite=config.suite,
        seeds=seeds,
        short_run_threshold=config.short_threshold,
        total_timesteps=config.timesteps,
        short_timesteps=config.short_timesteps,
        timeout_s=config.timeout,
        memory_mb=config.memory_mb,
        heldout=heldout,
        skip_short=skip_short,
        unsafe_no_sandbox=config.unsafe_no_sandbox,
        # fixed probe inputs: evaluations (hence selection, hence resume) are reproducible, and
        # runs with different search seeds share cached evaluations
        probe_seed=0,
    )


# -- the loop --------------------------------------------------------------------------------


class DiscoveryLoop:
    """Runs (or resumes) one discovery run against an archive.

    `proposer` follows metarl.discovery.proposers.base.Proposer. `on_event(kind, data)` is
    called from the loop's thread for the live display (kinds: run, status, submitted,
    candidate, confirm, generation, done).
    """

    def __init__(
        self,
        archive: Archive,
        config: DiscoverConfig,
        proposer,
        *,
        resume: str | None = None,
        on_event: Event | None = None,
        evaluator_factory=None,
    ):
        self.archive = archive
        self.proposer = proposer
        self.on_event = on_event or (lambda kind, data: None)
        self.evaluator_factory = evaluator_factory or _default_evaluator_factory
        self.resume_id = resume
        self.config = config.resolved()
        self.task = get_task(self.config.task)
        self.versions = library_versions()
        self.device = device_description()
        self._evaluator = None
        self._confirm_evaluator = None
        self._seed_evaluator = None
        self._pool: _DaemonPool | None = None
        self._session_start = time.monotonic()
        self._elapsed_base = 0.0
        self.run_id: str | None = None
        self.state: dict = {}

    # -- settings ---------------------------------------------------------------------------
    @property
    def child_settings(self):
        return _settings(
            self.config, seeds=self.config.seeds, heldout=False, skip_short=self.config.skip_short
        )

    @property
    def seed_settings(self):
        return _settings(
            self.config, seeds=self.config.seeds, heldout=self.config.heldout, skip_short=True
        )

    @property
    def confirm_settings(self):
        return _settings(
            self.config,
            seeds=self.config.confirm_seeds,
            heldout=self.config.heldout,
            skip_short=True,
        )

    def _key(self, settings) -> str:
        return eval_settings_key(self.task.name, settings, self.versions, self.device)

    # -- lifecycle --------------------------------------------------------------------------
    def _start(self) -> None:
        cfg = self.config
        if self.resume_id:
            run = self.archive.get_run(self.resume_id)
            if run["status"] == "running" and run.get("pid") and run.get("pid") != os.getpid():
                import socket

                if run.get("host") == socket.gethostname() and pid_alive(run["pid"]):
                    raise LoopError(
                        f"run {run['id']} is still running (pid {run['pid']}); stop it first"
                    )
            state = run.get("state") or {}
            if not state or state.get("version") != STATE_VERSION:
                raise LoopError(f"run {run['id']} has no resumable state")
            self.run_id = run["id"]
            self.state = state
            self._elapsed_base = float(state.get("elapsed_s", 0.0))
            self.proposer.restore_messages(
                [
                    *self.archive.messages(self.run_id),
                    *((state.get("plan") or {}).get("messages") or []),
                ]
            )
            if state.get("proposer") is not None:
                self.proposer.set_state(state["proposer"])
            self.archive.update_run(
                self.run_id,
                status="running",
                stop_reason=None,
                ended_at=None,
                error=None,
                pid=os.getpid(),
                config=cfg.to_dict(),
                budget_candidates=cfg.budget,
                max_time_s=cfg.max_time,
                max_cost_usd=cfg.max_cost,
            )
        else:
            self.state = {
                "version": STATE_VERSION,
                "phase": "seeds",
                "generation": 0,
                "next_seq": 0,
                "planned": 0,
                "islands": None,
                "incumbent": None,
                "plan": None,
                "rng": None,
                "elapsed_s": 0.0,
                "cost_usd": 0.0,
                "proposer": None,
                "seed_ids": [],
            }
            proposer_label = getattr(self.proposer, "name", cfg.proposer)
            self.run_id = self.archive.create_run(
                task=cfg.task,
                suite=cfg.suite,
                proposer=proposer_label,
                model=",".join(cfg.models) or None,
                mode=cfg.mode,
                seed=cfg.seed,
                config=cfg.to_dict(),
                config_hash=cfg.hash(),
                versions=self.versions,
                device=self.device,
                budget_candidates=cfg.budget,
                max_time_s=cfg.max_time,
                max_cost_usd=cfg.max_cost,
                state=self.state,
            )
        self.rng = selection.rng_from_state(self.state.get("rng"), cfg.seed)
        self._session_start = time.monotonic()
        self._emit(
            "run",
            {
                "run_id": self.run_id,
                "resumed": bool(self.resume_id),
                "config": cfg.to_dict(),
                "state": self._progress(),
            },
        )

    def run(self) -> RunResult:
        self._start()
        status, reason = "failed", ""
        try:
            self._pool = _DaemonPool(self.config.workers)
            if self.state["phase"] == "seeds":
                self._seeds_phase()
            while True:
                if self.state.get("plan") is None:
                    reason = self._budget_reason()
                    if reason:
                        status = "finished" if reason == "candidate budget spent" else "stopped"
                        break
                    self._plan_generation()
                self._evaluate_plan()
                self._end_generation()
        except _Stop as stop:
            status, reason = "stopped", stop.reason
        except KeyboardInterrupt:
            status, reason = "interrupted", "interrupted by the user"
            self._finish(status, reason)
            raise
        except BaseException as error:
            status, reason = "failed", f"{type(error).__name__}: {error}"
            self._finish(status, reason, error=reason)
            raise
        finally:
            self._close()
        self._finish(status, reason)
        run = self.archive.get_run(self.run_id)
        return RunResult(
            self.run_id,
            status,
            reason,
            run["candidates_count"] or 0,
            run.get("best_id"),
            run.get("best_fitness"),
        )

    def _finish(self, status: str, reason: str, error: str | None = None) -> None:
        try:
            self.state["elapsed_s"] = self._elapsed()
            count = self.archive.query(
                "SELECT count(*) AS n FROM candidates WHERE run_id = ? AND is_seed = 0",
                (self.run_id,),
            )[0]["n"]
            self.archive.update_run(
                self.run_id,
                status=status,
                stop_reason=reason,
                error=error,
                ended_at=_now(),
                elapsed_s=self.state["elapsed_s"],
                state=self.state,
                candidates_count=count,
            )
        except Exception:  # the archive stays consistent; the status is best effort here
            pass
        self._emit("done", {"status": status, "reason": reason, "state": self._progress()})

    def _close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        for evaluator in (self._evaluator, self._confirm_evaluator, self._seed_evaluator):
            if evaluator is not None:
                try:
                    evaluator.close()
                except Exception:
                    pass

    # -- helpers ----------------------------------------------------------------------------
    def _emit(self, kind: str, data: dict) -> None:
        try:
            self.on_event(kind, data)
        except Exception:
            pass  # a display problem never stops a run

    def _elapsed(self) -> float:
        return self._elapsed_base + (time.monotonic() - self._session_start)

    def _progress(self) -> dict:
        done = 0
        if self.run_id:
            done = self.archive.query(
                "SELECT count(*) AS n FROM candidates WHERE run_id = ? AND is_seed = 0",
                (self.run_id,),
            )[0]["n"]
        return {
            "generation": self.state.get("generation", 0),
            "planned": self.state.get("planned", 0),
            "done": done,
            "budget": self.config.budget,
            "elapsed_s": self._elapsed(),
            "max_time": self.config.max_time,
            "cost_usd": self.state.get("cost_usd", 0.0),
            "max_cost": self.config.max_cost,
            "incumbent": self.state.get("incumbent"),
        }

    def _check_time(self) -> None:
        if self.config.max_time is not None and self._elapsed() >= self.config.max_time:
            raise _Stop(f"time budget of {self.config.max_time:g} s spent")

    def _budget_reason(self) -> str | None:
        if self.state["planned"] >= self.config.budget:
            return "candidate budget spent"
        if self.config.max_time is not None and self._elapsed() >= self.config.max_time:
            return f"time budget of {self.config.max_time:g} s spent"
        if (
            self.config.max_cost is not None
            and self.state.get("cost_usd", 0.0) >= self.config.max_cost
        ):
            return f"cost budget of ${self.config.max_cost:g} spent"
        return None

    def _run_update(self) -> dict:
        self.state["elapsed_s"] = self._elapsed()
        self.state["rng"] = selection.rng_state(self.rng)
        try:
            self.state["proposer"] = self.proposer.get_state()
        except Exception:
            pass
        incumbent = self.state.get("incumbent")
        update = {
            "state": self.state,
            "elapsed_s": self.state["elapsed_s"],
            "cost_usd": self.state.get("cost_usd", 0.0),
            "generation": self.state["generation"],
        }
        if incumbent:
            row = self.archive.candidate(incumbent)
            update["best_id"] = incumbent
            update["best_fitness"] = selection.score_of(row["fitness"], row["confirmed_fitness"])
        count = self.archive.query(
            "SELECT count(*) AS n FROM candidates WHERE run_id = ? AND is_seed = 0", (self.run_id,)
        )[0]["n"]
        update["candidates_count"] = count
        return update

    def _save_state(self) -> None:
        self.archive.update_run(self.run_id, **self._run_update())

    def _evaluator_for(self, which: str):
        if which == "child":
            if self._evaluator is None:
                self._emit("status", {"text": "starting sandbox workers"})
                self._evaluator = self.evaluator_factory(self.child_settings, self.config.workers)
            return self._evaluator
        if which == "seed":
            if self._seed_evaluator is None:
                self._seed_evaluator = self.evaluator_factory(
                    self.seed_settings, self.config.workers
                )
            return self._seed_evaluator
        if self._confirm_evaluator is None:
            self._confirm_evaluator = self.evaluator_factory(self.confirm_settings, 1)
        return self._confirm_evaluator

    def _base_row(self, settings) -> dict:
        return {
            "run_id": self.run_id,
            "task": self.task.name,
            "suite": self.config.suite,
            "seeds": list(range(settings.seeds)),
            "total_timesteps": self.config.timesteps,
            "eval_key": self._key(settings),
            "config_hash": suite_config_hash(self.config.suite, self.config.timesteps),
            "versions": self.versions,
            "device": self.device,
        }

    def _fingerprints(self) -> dict[str, str]:
        rows = self.archive.query(
            "SELECT id, fingerprint FROM candidates WHERE run_id = ? AND fingerprint IS NOT NULL "
            "AND status != 'duplicate' ORDER BY seq",
            (self.run_id,),
        )
        out: dict[str, str] = {}
        for row in rows:
            out.setdefault(row["fingerprint"], row["id"])
        return out

    def _known_hashes(self) -> dict[str, str]:
        rows = self.archive.query(
            "SELECT id, hash FROM candidates WHERE run_id = ? ORDER BY seq", (self.run_id,)
        )
        out: dict[str, str] = {}
        for row in rows:
            out.setdefault(row["hash"], row["id"])
        return out

    def _wait(self, futures: dict[Future, Any], on_done: Callable[[Any, Any], None]) -> None:
        """Process finished evaluations as they complete, in the main thread; stop on time."""
        pending = dict(futures)
        while pending:
            done = [f for f in pending if f.done()]
            if not done:
                self._check_time()
                time.sleep(0.1)
                continue
            for future in done:
                item = pending.pop(future)
                try:
                    outcome = future.result()
                except Exception as error:  # the evaluator itself failed: archive the reason
                    outcome = Outcome.failure(
                        "full", f"the evaluator failed: {type(error).__name__}: {error}"
                    )
                on_done(item, outcome)

    # -- seeds ------------------------------------------------------------------------------
    def _seeds_phase(self) -> None:
        settings = self.seed_settings
        key = self._key(settings)
        seeds = self.task.seed_programs()
        ids = self.state.get("seed_ids") or []
        if len(ids) != len(seeds):
            ids = [f"{self.run_id}-{i}" for i in range(len(seeds))]
            self.state["seed_ids"] = ids
            self.state["next_seq"] = max(self.state["next_seq"], len(seeds))
        self._emit("status", {"text": f"evaluating {len(seeds)} seeds (cached per archive)"})
        futures = {}
        for seq, (seed, cid) in enumerate(zip(seeds, ids)):
            if self.archive.has_candidate(cid):
                continue
            row = {
                **self._base_row(settings),
                "id": cid,
                "seq": seq,
                "hash": source_hash(seed.source),
                "code": seed.source,
                "name": seed.name,
                "thought": f"seed program {seed.path.name}",
                "parent_ids": [],
                "generation": 0,
                "island": None,
                "slot": seq,
                "is_seed": 1,
                "proposer": "seed",
                "operator": "seed",
            }
            cached = self.archive.find_cached(row["hash"], key)
            if cached is not None:
                self._write_cached(row, cached)
                continue
            self._emit("submitted", {"id": cid, "name": seed.name})
            future = self._pool.submit(
                self._evaluator_for("seed").evaluate, seed.source, self.task.name
            )
            futures[future] = row

        def done(row, outcome):
            self.archive.record_candidate(row, outcome, run_update=self._run_update())
            self._emit("candidate", self._event_row(row["id"]))

        self._wait(futures, done)
        if self._seed_evaluator is not None:
            self._seed_evaluator.close()
            self._seed_evaluator = None
        passed = [cid for cid in ids if self.archive.candidate(cid)["status"] == "passed"]
        if not passed:
            reasons = "; ".join(
                f"{self.archive.candidate(c)['name']}: {self.archive.candidate(c)['reason']}"
                for c in ids
            )
            raise LoopError(f"no seed of task {self.task.name!r} passed evaluation ({reasons})")
        self.state["islands"] = selection.Islands.start(
            self.config.islands, self.config.population, passed
        ).to_state()
        best = max(passed, key=lambda c: (self._score(c), -ids.index(c)))
        self.state["incumbent"] = best
        self.state["phase"] = "generations"
        self._save_state()

    def _write_cached(self, row: dict, cached: dict) -> None:
        outcome = decode_outcome(cached)
        row = {**row, "cached_from": cached["id"]}
        self.archive.record_candidate(row, outcome, run_update=None)
        if cached.get("confirmed_seeds"):
            with self.archive.transaction() as db:
                db["candidates"].update(
                    row["id"],
                    {
                        "confirmed_fitness": cached["confirmed_fitness"],
                        "confirmed_heldout": cached.get("confirmed_heldout"),
                        "confirmed_seeds": json.dumps(cached.get("confirmed_seeds")),
                    },
                )
        self._save_state()
        self._emit("candidate", self._event_row(row["id"]))

    # -- generations ------------------------------------------------------------------------
    def _members(self, ids) -> dict[str, selection.Member]:
        out = {}
        for cid in ids:
            row = self.archive.candidate(cid)
            out[cid] = selection.Member(
                cid,
                self._score(cid, row),
                selection.code_tokens(row["code"] or ""),
                row["generation"] or 0,
            )
        return out

    def _score(self, cid: str, row: dict | None = None) -> float:
        row = row or self.archive.candidate(cid)
        return selection.score_of(row["fitness"], row["confirmed_fitness"])

    def _parent_info(self, cid: str) -> ParentInfo:
        row = self.archive.candidate(cid)
        return ParentInfo(
            id=cid,
            code=row["code"],
            name=row["name"] or "",
            thought=row["thought"] or "",
            fitness=row["fitness"],
            outcome=decode_outcome(row),
            generation=row["generation"] or 0,
        )

    def _plan_generation(self) -> None:
        cfg = self.config
        generation = self.state["generation"] + 1
        count = min(cfg.children, cfg.budget - self.state["planned"])
        islands = selection.Islands.from_state(self.state["islands"])
        all_ids = sorted({c for m in islands.members for c in m})
        lookup = self._members(all_ids)
        plans = selection.plan_children(
            self.rng,
            islands,
            lookup,
            count,
            crossover_probability=cfg.crossover,
            tournament_size=cfg.tournament,
            novelty_weight=cfg.novelty,
            inspirations=cfg.inspirations,
            first_island=(generation - 1) * cfg.children % len(islands),
        )
        self._emit("status", {"text": f"generation {generation}: proposing {count} children"})
        incumbent = self.state.get("incumbent")
        best = self._parent_info(incumbent) if incumbent else None
        requests = []
        for plan in plans:
            requests.append(
                ProposalRequest(
                    task=self.task,
                    parents=[self._parent_info(p) for p in plan.parent_ids],
                    inspirations=[self._parent_info(p) for p in plan.inspiration_ids],
                    best=best,
                    generation=generation,
                    island=plan.island,
                    rng_seed=plan.rng_seed,
                )
            )
        proposals = self._propose_all(requests)
        known = self._known_hashes()
        slots = []
        for index, (plan, request, proposal) in enumerate(zip(plans, requests, proposals)):
            cid = f"{self.run_id}-{self.state['next_seq']}"
            self.state["next_seq"] += 1
            attempts = [proposal]
            duplicate_of = None
            while proposal.code is not None and source_hash(proposal.code) in known:
                if len(attempts) > cfg.dedup_retries:
                    duplicate_of = known[source_hash(proposal.code)]
                    break
                retry = dataclasses.replace(
                    request, rng_seed=(request.rng_seed * 7919 + len(attempts)) % (2**31 - 1)
                )
                proposal = self._propose_one(retry)
                attempts.append(proposal)
            calls = [c for p in attempts for c in p.calls]
            proposal.calls = calls
            if proposal.code is not None and duplicate_of is None:
                known[source_hash(proposal.code)] = cid
            cost = sum(c.cost_usd for c in calls if c.cost_usd is not None)
            self.state["cost_usd"] = self.state.get("cost_usd", 0.0) + cost
            slots.append(
                {
                    "slot": index,
                    "id": cid,
                    "seq": self.state["next_seq"] - 1,
                    "island": plan.island,
                    "parent_ids": plan.parent_ids,
                    "inspiration_ids": plan.inspiration_ids,
                    "rng_seed": plan.rng_seed,
                    "proposal": _proposal_to_dict(proposal),
                    "duplicate_of": duplicate_of,
                    "retries": len(attempts) - 1,
                }
            )
        try:
            messages = self.proposer.drain_messages() or []
        except Exception:
            messages = []
        self.state["planned"] += count
        self.state["plan"] = {"generation": generation, "slots": slots, "messages": messages}
        self._save_state()

    def _propose_one(self, request: ProposalRequest) -> Proposal:
        try:
            proposal = self.proposer.propose(request)
        except Exception as error:  # a proposer bug or an API failure: archived, not fatal
            return Proposal(
                code=None,
                parent_ids=[p.id for p in request.parents],
                proposer=getattr(self.proposer, "name", self.config.proposer),
                failure=f"the proposer raised {type(error).__name__}: {error}",
            )
        if proposal is None:
            return Proposal(
                code=None,
                parent_ids=[p.id for p in request.parents],
                proposer=getattr(self.proposer, "name", ""),
                failure="the proposer returned nothing",
            )
        if not proposal.parent_ids:
            proposal.parent_ids = [p.id for p in request.parents]
        if proposal.code is not None and not isinstance(proposal.code, str):
            proposal.code = None
            proposal.failure = "the proposer returned code that is not text"
        if proposal.code is not None and not proposal.code.strip():
            proposal.code = None
            proposal.failure = proposal.failure or "the proposer returned empty code"
        return proposal

    def _propose_all(self, requests: list[ProposalRequest]) -> list[Proposal]:
        if len(requests) <= 1 or self.config.mode == "conversation":
            return [self._propose_one(r) for r in requests]
        concurrency = max(
            1,
            min(len(requests), self.config.max_concurrency if self.config.proposer == "llm" else 1),
        )
        if concurrency == 1:
            return [self._propose_one(r) for r in requests]
        results: list[Proposal | None] = [None] * len(requests)
        pool = _DaemonPool(concurrency)
        futures = {pool.submit(self._propose_one, r): i for i, r in enumerate(requests)}
        try:
            for future, i in futures.items():
                results[i] = future.result()
        finally:
            pool.shutdown()
        return results  # type: ignore[return-value]

    def _evaluate_plan(self) -> None:
        plan = self.state["plan"]
        generation = plan["generation"]
        settings = self.child_settings
        key = self._key(settings)
        futures = {}
        for slot in plan["slots"]:
            if self.archive.has_candidate(slot["id"]):
                continue
            proposal = _proposal_from_dict(slot["proposal"])
            code = proposal.code
            row = {
                **self._base_row(settings),
                "id": slot["id"],
                "seq": slot["seq"],
                "hash": source_hash(code) if code else None,
                "code": code,
                "name": proposal.name or None,
                "thought": proposal.thought or None,
                "parent_ids": proposal.parent_ids or slot["parent_ids"],
                "generation": generation,
                "island": slot["island"],
                "slot": slot["slot"],
                "is_seed": 0,
                "proposer": proposal.proposer or getattr(self.proposer, "name", ""),
                "operator": proposal.operator or None,
            }
            if code is None:
                outcome = Outcome.failure(
                    "propose", proposal.failure or "the proposer produced no program"
                )
                self._archive_child(row, proposal, outcome)
                continue
            if slot.get("duplicate_of"):
                outcome = Outcome.failure(
                    "dedup",
                    f"the same program as candidate {slot['duplicate_of']}",
                    duplicate_of=slot["duplicate_of"],
                )
                self._archive_child(row, proposal, outcome)
                continue
            cached = self.archive.find_cached(row["hash"], key)
            if cached is not None and cached["run_id"] != self.run_id:
                outcome = decode_outcome(cached)
                row["cached_from"] = cached["id"]
                self._archive_child(row, proposal, outcome)
                continue
            self._check_time()
            self._emit(
                "submitted", {"id": row["id"], "name": row["name"], "operator": row["operator"]}
            )
            evaluator = self._evaluator_for("child")
            future = self._pool.submit(
                evaluator.evaluate, code, self.task.name, self._fingerprints()
            )
            futures[future] = (row, proposal)

        self._wait(futures, lambda item, outcome: self._archive_child(item[0], item[1], outcome))

    def _archive_child(self, row: dict, proposal: Proposal, outcome: Outcome) -> None:
        try:
            self.proposer.feedback(proposal, outcome, row["id"])
        except Exception:
            pass
        try:
            drained = self.proposer.drain_messages() or []
        except Exception:
            drained = []
        plan = self.state.get("plan") or {}
        messages = list(plan.get("messages") or []) + list(drained)
        if plan:
            plan["messages"] = []
        self.archive.record_candidate(
            row,
            outcome,
            calls=[_call_record(c) for c in proposal.calls],
            messages=messages,
            run_update=self._run_update(),
        )
        self._emit("candidate", self._event_row(row["id"]))

    def _end_generation(self) -> None:
        cfg = self.config
        plan = self.state["plan"]
        generation = plan["generation"]
        islands = selection.Islands.from_state(self.state["islands"])
        children = [self.archive.candidate(slot["id"]) for slot in plan["slots"]]
        for child in children:
            if child["status"] == "passed" and child["fitness"] is not None:
                islands.add(child["island"] or 0, child["id"])
        incumbent = self.state.get("incumbent")
        if cfg.confirm and incumbent:
            passed = [(c["id"], c["fitness"]) for c in children if c["status"] == "passed"]
            for cid in selection.contenders(passed, self._score(incumbent), limit=1):
                self._check_time()
                self._confirm(incumbent)
                self._confirm(cid)
                confirmed = self.archive.candidate(cid)["confirmed_fitness"]
                if confirmed is not None and confirmed > self._score(incumbent):
                    incumbent = cid
        elif incumbent:
            for child in children:
                if child["status"] == "passed" and self._score(child["id"]) > self._score(
                    incumbent
                ):
                    incumbent = child["id"]
        all_ids = sorted({c for m in islands.members for c in m})
        lookup = self._members(all_ids)
        islands.truncate(lookup, cfg.novelty)
        moves = []
        if generation % cfg.migration_interval == 0:
            moves = islands.migrate(lookup)
            islands.truncate(lookup, cfg.novelty)
        self.state["islands"] = islands.to_state()
        self.state["incumbent"] = incumbent
        self.state["generation"] = generation
        self.state["plan"] = None
        self._save_state()
        self._emit(
            "generation",
            {
                "generation": generation,
                "incumbent": incumbent,
                "score": self._score(incumbent) if incumbent else None,
                "migrations": moves,
                "state": self._progress(),
            },
        )

    def _confirm(self, cid: str) -> None:
        row = self.archive.candidate(cid)
        if row["confirmed_fitness"] is not None or row.get("confirmed_seeds"):
            return
        settings = self.confirm_settings
        # the same program confirmed the same way anywhere in the archive
        hit = self.archive.query(
            "SELECT confirmed_fitness, confirmed_heldout, confirmed_seeds FROM candidates "
            "WHERE hash = ? AND eval_key = ? AND confirmed_seeds IS NOT NULL LIMIT 1",
            (row["hash"], row["eval_key"]),
        )
        if hit:
            with self.archive.transaction() as db:
                db["candidates"].update(cid, hit[0])
                self.archive.update_run(self.run_id, **self._run_update())
        else:
            self._emit("status", {"text": f"confirming {cid} on {settings.seeds} seeds"})
            future = self._pool.submit(
                self._evaluator_for("confirm").evaluate, row["code"], self.task.name
            )
            outcome: list[Outcome] = []
            self._wait({future: cid}, lambda _cid, result: outcome.append(result))
            result = outcome[0]
            if not result.passed and result.fitness is None:
                result.fitness = None
            self.archive.record_confirmation(
                cid, result, run_id=self.run_id, run_update=self._run_update()
            )
        after = self.archive.candidate(cid)
        self._emit(
            "confirm",
            {
                "id": cid,
                "name": after["name"],
                "fitness": after["fitness"],
                "confirmed": after["confirmed_fitness"],
            },
        )

    def _event_row(self, cid: str) -> dict:
        row = self.archive.candidate(cid)
        return {
            "id": cid,
            "name": row["name"],
            "operator": row["operator"],
            "status": row["status"],
            "stage": row["stage"],
            "reason": row["reason"],
            "fitness": row["fitness"],
            "eval_s": row["eval_s"],
            "is_seed": bool(row["is_seed"]),
            "generation": row["generation"],
            "island": row["island"],
            "cached": row["cached_from"] is not None,
            "state": self._progress(),
        }


def _now() -> str:

    return now()


__all__ = ["DiscoveryLoop", "LoopError", "RunResult", "ArchiveError"]
