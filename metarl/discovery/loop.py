"""The discovery loop (population mode; conversation mode is the special case of one island and
one child per generation).

    seeds: evaluated as one batch (once per archive, then cached), archived in order
    repeat until a budget is spent:
        plan a generation (planning.py): parents per child slot (islands, fitness + novelty
            tournaments), one proposal per slot, re-asked a few times when it repeats a program
        evaluate the generation's children as one batch through the sandboxed cascade, `workers`
            at a time (the cascade also rejects behavioural duplicates by fingerprint)
        archive each child in slot order: candidate + evaluations + LLM calls + messages + the
            run's state, in one transaction
        end of generation: children join their islands; the child with the best training
            score above the incumbent's races it on the suite's validation envs, on fresh
            seeds, round by round, and displaces it only when significantly better and not
            significantly worse at several times the budget (races.py);
            a new incumbent's test envs are then re-measured on fresh seeds (reported, never
            read); truncation; migration; every `guidance_every` generations the prompt's
            "what worked / what failed" notes rewritten from the archive (guidance.py), once a
            next generation is planned (a run's last generation costs no call for them)

Exact resume. The run's state (state.py, `runs.state`) holds the generation counter, the islands,
the numpy RNG state, the proposer's state, the budget spent, and the current generation's
*plan*: every child slot with its parents, RNG seed, pre-assigned candidate id and proposal.
A plan is written before any of its children is evaluated, so a process killed at any instant
resumes by evaluating the plan's slots that have no archived candidate yet (only in-flight
evaluations are lost: their time, never their proposals), and then carries on with the same
RNG state, hence the same parents and programs an uninterrupted run would have produced. The
generation's end is computed from archived rows in slot order, never from completion order.
"""

from __future__ import annotations

import logging
from typing import Callable

from metarl.archives.faults import ArchiveFault
from metarl.archives.near_duplicates import run_behaviours
from metarl.archives.reuse import archived_score
from metarl.archives.runs import failure_reason, fault_of_run
from metarl.archives.store import Archive, ArchiveError, decode_outcome
from metarl.discovery import curriculum, guidance, planning, records, selection
from metarl.discovery.batches import Batches
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.proposers.base import Proposal
from metarl.discovery.races import Races
from metarl.discovery.runs import LoopError, RunBook, RunResult, Stop
from metarl.discovery.state import STATE_VERSION, RunState, Slot
from metarl.evaluation import roles
from metarl.evaluation.near_duplicates import MAX_KNOWN_BEHAVIOURS, is_near
from metarl.evaluation.outcome import Outcome
from metarl.evaluation.seeds import draw_pool, pool_size
from metarl.platform import device_description, evaluation_identity
from metarl.rl.lr_sweep import choose_lr, log_grid, parse_sweep
from metarl.rl.suites import get_suite
from metarl.tasks import get_task

logger = logging.getLogger(__name__)
Event = Callable[[str, dict], None]


class DiscoveryLoop:
    """Runs (or resumes) one discovery run against an archive.

    `proposer` follows metarl.discovery.proposers.base.Proposer. `on_event(kind, data)` is
    called from the loop's thread for the live display (kinds: run, status, submitted,
    candidate, confirm, generation, done). `evaluator_factory(settings, workers)` builds the
    evaluators (with `evaluate_batch` and `close`); the default is the sandboxed cascade.
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
        self.evaluator_factory = evaluator_factory
        self.resume_id = resume
        self.config = config.resolved()
        self.task = get_task(self.config.task)
        self.task_suite = get_suite(self.config.suite)
        self.versions = evaluation_identity()  # what its evaluation keys are built on
        self.device = device_description()
        self.run_id: str | None = None
        self.state = RunState()
        self.book: RunBook | None = None  # the run's bookkeeping, once started
        self.rows: records.RowMaker | None = None  # the run's candidate rows, once started
        self.batches: Batches | None = None
        self.races: Races | None = None  # who may replace the incumbent, once started

    def run(self) -> RunResult:
        """Run (or resume) the run; how this session ended.

        Raises:
            LiveRun: the run to resume is still running.
            LoopError: it cannot start or go on.
        """
        self.book = RunBook.open(
            self.archive, self.config, self.proposer, self.versions, self.device, self.resume_id
        )
        with self.book.session:  # heartbeat and log; an escaping error is recorded as the end
            return self._run()

    def _run(self) -> RunResult:
        self._start()
        status, reason = "failed", ""
        try:
            self.batches = Batches(
                self.config,
                self.task.name,
                self.evaluator_factory,
                self.book.check_time,
                self._emit,
            )
            self.batches.seed_pool = self.state.seed_pool
            suite = self.task_suite
            self.races = Races(
                self.archive,
                self.config,
                self.batches,
                self.book,
                self.run_id,
                list(suite.validation or suite.envs),
                self._emit,
            )
            if self.state.phase == "seeds":
                self._seeds_phase()
            while True:
                if self.state.plan is None:
                    reason = self.book.budget_reason()
                    if reason:
                        status = "finished" if reason == "candidate budget spent" else "stopped"
                        break
                    self._plan_generation()
                self._evaluate_plan()
                self._end_generation()
        except Stop as stop:
            status, reason = "stopped", stop.reason
        except KeyboardInterrupt:
            status, reason = "interrupted", "interrupted by the user"
            self._finish(status, reason)
            raise
        except BaseException as error:
            status, reason = "failed", failure_reason(error)
            recorded = self._finish(status, reason, error=reason)
            if isinstance(error, ArchiveFault):  # which run stopped, what its row says, what next
                raise fault_of_run(error, self.run_id, "discovery", recorded) from error
            raise
        finally:
            if self.batches is not None:
                self.batches.close()
        self._finish(status, reason)
        return self.book.result(status, reason)

    def _start(self) -> None:
        self.book.restore_proposer()
        self.run_id, self.state = self.book.run_id, self.book.state
        if self.config.seed_values is None:
            cfg = self.config
            # a candidate's selection seeds, its validation rounds and its test measurement
            # never share a seed: the pool holds all three; a late race may get a round past
            # `race_seeds` to stay winnable (statistics.race_plan)
            raced = cfg.race_seeds + cfg.confirm_seeds
            counts = [cfg.seeds] + [raced, cfg.confirm_seeds] * cfg.confirm
            # a stability round is fresh to both sides' selection and validation seeds
            checked = bool(cfg.confirm and cfg.stability)
            counts += [cfg.seeds, raced, cfg.confirm_seeds] * checked
            size = pool_size(sum(counts))
            pool = list(self.state.seed_pool or [])
            if len(pool) < size:  # new, or a run from before races: more values, same secret
                extra = [v for v in draw_pool(2 * size) if v not in set(pool)]
                self.state.seed_pool = pool + extra[: size - len(pool)]
        self.rows = records.RowMaker(
            self.run_id, self.task.name, self.config, self.versions, self.device
        )
        data = {"run_id": self.run_id, "resumed": bool(self.resume_id)}
        self._emit("run", {**data, "config": self.config.to_dict(), "state": self.book.progress()})

    def _finish(self, status: str, reason: str, error: str | None = None) -> bool:
        """Record how this session ended, and tell the display.

        Returns:
            Whether the run's row was written (`RunBook.finish`; not when the archive refuses
            writes).
        """
        recorded = self.book.finish(status, reason, error)
        data = {"status": status, "reason": reason}
        try:
            data["state"] = self.book.progress()
        except ArchiveError as failure:  # a run ended by its archive: the last counts stay
            logger.warning("run %s: its progress could not be read: %s", self.run_id, failure)
        self._emit("done", data)
        return recorded

    # -- seeds ------------------------------------------------------------------------------
    def _seeds_phase(self) -> None:
        settings = records.cascade_settings(self.config, "seed")
        key = self.rows.key(settings)
        seeds = self.task.seed_programs()
        ids = self.state.seed_ids
        if len(ids) != len(seeds):
            ids = [f"{self.run_id}-{i}" for i in range(len(seeds))]
            self.state.seed_ids = ids
            self.state.next_seq = max(self.state.next_seq, len(seeds))
        self._emit(
            "status", {"text": f"scoring the {len(seeds)} seed programs (cached per archive)"}
        )
        pending = []  # (row, cached evaluation or None), in seed order
        for seq, (seed, cid) in enumerate(zip(seeds, ids)):
            if not self.archive.has_candidate(cid):
                row = self.rows.seed(settings, cid, seq, seed)
                pending.append((row, self.archive.find_cached(row["hash"], key)))
        outcomes = iter(self.batches.evaluate("seed", [row for row, hit in pending if hit is None]))
        for row, hit in pending:
            if hit is not None:
                self._write_cached(row, hit)
                continue
            self.archive.record_candidate(row, next(outcomes), run_update=self.book.update())
            self._emit("candidate", self._event(row["id"]))
        self.batches.close("seed")
        passed = [cid for cid in ids if self.archive.candidate(cid)["status"] == "passed"]
        if not passed:
            rows = [self.archive.candidate(c) for c in ids]
            reasons = "; ".join(f"{r['name']}: {r['reason']}" for r in rows)
            raise LoopError(f"no seed of task {self.task.name!r} passed evaluation ({reasons})")
        cfg = self.config
        self.state.islands = selection.Islands.start(cfg.islands, cfg.population, passed).to_state()
        self.state.incumbent = max(passed, key=lambda c: (self._score(c), -ids.index(c)))
        self._record_incumbent(0, max(self.archive.candidate(c)["seq"] for c in ids))
        self.state.phase = "generations"
        self.book.save()

    def _write_cached(self, row: dict, cached: dict) -> None:
        row = {**row, "cached_from": cached["id"]}
        self.archive.record_candidate(row, decode_outcome(cached), run_update=None)
        if cached.get("confirmed_seeds"):
            self.archive.copy_confirmation(row["id"], cached)
        self.book.save()
        self._emit("candidate", self._event(row["id"]))

    # -- generations ------------------------------------------------------------------------
    def _plan_generation(self) -> None:
        state = self.state
        generation = state.generation + 1
        # the end of every `guidance_every`-th generation, once another one will read them: the
        # prompt's notes rewritten from the archive and saved with the state (guidance.py)
        written = guidance.write_due(
            self.archive, self.config, self.proposer, self.book, state.generation
        )
        if written is not None:
            text = f"guidance version {written.version} written ({written.source})"
            self._emit("status", {"text": text})
        count = min(self.config.children, self.config.budget - state.planned)
        self._emit("status", {"text": f"generation {generation}: proposing {count} children"})
        plan = planning.plan_generation(
            self.archive,
            self.proposer,
            self.config,
            self.task,
            self.book.rng,
            run_id=self.run_id,
            generation=generation,
            count=count,
            next_seq=state.next_seq,
            islands_state=state.islands,
            incumbent=state.incumbent,
        )
        for slot in plan.slots:
            state.cost_usd += slot.cost_usd
            state.near_duplicates_code += slot.near_duplicates  # saved with the plan
        if self.config.curriculum:  # this generation's training levels (discovery/curriculum.py)
            levels = curriculum.curriculum_of(self.config, state.curriculum)
            draw, plan.train_envs = curriculum.draw_levels(self.config, levels, generation)
            plan.draw = {
                "seeds": list(draw.seeds),
                "replay": draw.replay,
                "indices": list(draw.indices),
            }
            state.curriculum = levels.to_dict()
            logger.info("generation %d trains on %s", generation, ", ".join(plan.train_envs))
        state.next_seq += len(plan.slots)
        state.planned += count
        state.plan = plan
        self.book.save()

    def _evaluate_plan(self) -> None:
        plan = self.state.plan
        settings = records.cascade_settings(self.config, "child", train_envs=plan.train_envs)
        key = self.rows.key(settings)
        label = getattr(self.proposer, "name", "")
        pending = []  # (slot, row, outcome when it needs no evaluation), in slot order
        for slot in plan.slots:
            if not self.archive.has_candidate(slot.id):
                row = self.rows.child(settings, slot, plan.generation, label)
                pending.append((slot, row, self._settled(slot, row, key)))
        rows = [row for _, row, outcome in pending if outcome is None]
        known = self.archive.run_fingerprints(self.run_id) if rows else None
        behaviours = None
        if rows and self.config.behaviour_novelty > 0:
            behaviours = run_behaviours(self.archive, self.run_id, MAX_KNOWN_BEHAVIOURS)
        outcomes = iter(
            self.batches.evaluate(
                "child", rows, known, train_envs=plan.train_envs, behaviours=behaviours
            )
        )
        for slot, row, outcome in pending:
            self._archive_child(row, slot.proposal, next(outcomes) if outcome is None else outcome)

    def _settled(self, slot: Slot, row: dict, key: str) -> Outcome | None:
        """A child's outcome when it needs no evaluation: no program, a program the run already
        has, or one evaluated the same way by another run (`row` then notes where from)."""
        proposal = slot.proposal
        if proposal.code is None:
            reason = proposal.failure or "the proposer produced no program"
            return Outcome.failure("propose", reason)
        if slot.duplicate_of:  # the same program, or nearly (`duplicate_reason` says how near)
            reason = slot.duplicate_reason or f"the same program as candidate {slot.duplicate_of}"
            return Outcome.failure("dedup", reason, duplicate_of=slot.duplicate_of)
        scored = archived_score(self.archive, row["code"], key, exclude_run=self.run_id)
        if scored is not None:
            row["cached_from"] = scored.cached_from
            return scored.outcome
        return None

    def _archive_child(self, row: dict, proposal: Proposal, outcome: Outcome) -> None:
        try:
            self.proposer.feedback(proposal, outcome.selection_view(), row["id"])
        except Exception:  # plug-in code: a bug there costs the dialogue one note, not the run
            logger.exception("the proposer's feedback on %s failed", row["id"])
        plan = self.state.plan
        messages = [*plan.messages, *planning.drain_messages(self.proposer)]
        plan.messages = []
        calls = records.call_records(proposal)
        if is_near(outcome.stage, outcome.duplicate_of, outcome.reason):  # with the candidate
            self.state.near_duplicates_behaviour += 1
        update = self.book.update()
        self.archive.record_candidate(
            row, outcome, calls=calls, messages=messages, run_update=update
        )
        self._emit("candidate", self._event(row["id"]))

    def _end_generation(self) -> None:
        cfg, state = self.config, self.state
        generation = state.plan.generation
        islands = selection.Islands.from_state(state.islands)
        children = [self.archive.candidate(slot.id) for slot in state.plan.slots]
        if state.plan.draw is not None:
            self._score_levels(generation, children)
        for child in children:
            if child["status"] == "passed" and child["fitness"] is not None:
                islands.add(child["island"] or 0, child["id"])
        incumbent = self._next_incumbent(state.incumbent, children)
        lookup = planning.members(self.archive, islands)
        islands.truncate(lookup, cfg.novelty)
        moves = []
        if generation % cfg.migration_interval == 0:
            moves = islands.migrate(lookup)
            islands.truncate(lookup, cfg.novelty)
        state.islands, state.incumbent = islands.to_state(), incumbent
        seqs = [child["seq"] for child in children if child.get("seq") is not None]
        self._record_incumbent(generation, max(seqs) if seqs else state.next_seq - 1)
        state.generation, state.plan = generation, None
        self.book.save()
        score = self._score(incumbent) if incumbent else None
        data = {"generation": generation, "incumbent": incumbent, "score": score}
        self._emit("generation", {**data, "migrations": moves, "state": self.book.progress()})

    def _record_incumbent(self, generation: int, seq: int) -> None:
        """Archive the incumbent selection just decided, with the state, when it changed: the
        report draws its incumbent line from these, never from the scores."""
        history, incumbent = self.state.incumbents, self.state.incumbent
        if incumbent and (not history or history[-1]["id"] != incumbent):
            history.append({"generation": generation, "id": incumbent, "seq": int(seq)})

    def _score_levels(self, generation: int, children: list[dict]) -> None:
        """Score the generation's drawn levels from its children and update the curriculum."""
        state, plan = self.state, self.state.plan
        history = state.curriculum_history
        if history and history[-1]["generation"] == generation:  # resumed after scoring them
            return
        levels = curriculum.curriculum_of(self.config, state.curriculum)
        draw = curriculum.draw_from_dict(plan.draw)
        outcomes = [decode_outcome(child) for child in children]
        scores = curriculum.level_scores(self.config.curriculum, plan.train_envs, outcomes)
        levels.update(draw, scores)
        state.curriculum = levels.to_dict()
        entry = curriculum.history_entry(generation, draw, plan.train_envs, scores, levels)
        state.curriculum_history.append(entry)

    def _next_incumbent(self, incumbent: str | None, children: list[dict]) -> str | None:
        """The incumbent after a generation.

        Training scores only nominate: the child with the best training score above the
        incumbent's is raced against it on the suite's validation envs and takes its place
        only when it is significantly better there and not significantly worse at `stability`
        times the budget (races.py). Test scores are not read here,
        nor anywhere in selection: this method sees candidate ids and their training and
        validation scores only. Without `confirm`, the best training score wins (the
        unraced selection, kept for comparison: benchmarks/generalisation.py). A contest an
        evaluator fault stopped is attempted again first (races.py `retries`).
        """
        if not incumbent:
            return incumbent
        if not self.config.confirm:
            for child in children:
                if child["status"] != "passed":
                    continue
                if self._score(child["id"]) > self._score(incumbent):
                    incumbent = child["id"]
            return incumbent
        for cid in self.races.retries(incumbent):  # contests an evaluator fault stopped
            self.book.check_time()
            if self.races.contest(incumbent, cid):
                incumbent = cid
                self._measure_test(cid)
                break
        passed = [(c["id"], c["fitness"]) for c in children if c["status"] == "passed"]
        for cid in selection.contenders(passed, self._score(incumbent), limit=1):
            self.book.check_time()
            if self.races.contest(incumbent, cid):
                incumbent = cid
                self._measure_test(cid)
        return incumbent

    def _measure_test(self, cid: str) -> None:
        """The new incumbent's test envs on fresh seeds: reported, never read by selection."""
        if not (self.config.heldout and self.task_suite.heldout):
            return
        row = self.archive.candidate(cid)
        if row.get("final_seeds"):
            return
        seen = sorted({int(s) for key in ("seeds", "validation_seeds") for s in row.get(key) or []})
        rate = self._chosen_rate(cid)
        sweep, scale = rate
        at = f" at learning rate {sweep}" if sweep else ""
        at = at or (f" at {scale:.3g} x each env's tuned learning rate" if scale != 1.0 else "")
        self._emit("status", {"text": f"measuring {cid} on the test envs{at}"})
        [outcome] = self.batches.evaluate("final", [row], exclude_seeds=seen, final_rate=rate)
        self.archive.record_final(cid, outcome, run_id=self.run_id, run_update=self.book.update())

    def _chosen_rate(self, cid: str) -> tuple[str | None, float]:
        """The learning rate the candidate's validation rounds chose: its test envs are
        measured at that one rate, on fresh seeds, never at the best of several test runs.

        Returns:
            (None, multiplier of each env's tuned rate) for a grid around the tuned rates,
            (the chosen rate, 1.0) for explicit rates, (None, 1.0) without a sweep.
        """
        spec = str(self.config.lr_sweep or "").strip()
        if not spec:
            return None, 1.0
        counted = spec.isdigit()
        grid = log_grid(1.0, int(spec)) if counted else parse_sweep(spec, 1.0)
        scores = roles.rate_scores(self.archive.role_evaluations(cid, "validation"), grid)
        if all(score is None for score in scores):
            return None, 1.0
        chosen = choose_lr(grid, scores)
        return (None, chosen) if counted else (repr(chosen), 1.0)

    # -- helpers --------------------------------------------------------------------------
    def _emit(self, kind: str, data: dict) -> None:
        try:
            self.on_event(kind, data)
        except Exception:  # the display is the caller's code: a display bug never stops a run
            logger.exception("the display failed on a %r event", kind)

    def _event(self, cid: str) -> dict:
        return records.candidate_event(self.archive.candidate(cid), self.book.progress())

    def _score(self, cid: str) -> float:
        return planning.score(self.archive, cid)


__all__ = ["DiscoveryLoop", "LoopError", "RunResult", "ArchiveError", "STATE_VERSION"]
