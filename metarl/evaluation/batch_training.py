"""A batch's training in trainer jobs, seen from the parent: the job, its clock, its verdicts,
and whose fault it is when the job fails.

Stages 2b-4 of a batch run in one sandboxed trainer (stages.evaluate_artifacts): each candidate
is verified, probed and pre-flighted on its own, then the candidates share one compiled program
per run config. This is the parent's half: it starts the job, watches it while it runs,
validates and rescores its result (`verify_outcome`), and when the job gives no result decides
whose failure it was.

Why (measured by an attacker on the 2-core CPU, before this module): one candidate broke the
whole batch. An artifact that failed only at the training shapes failed the *shared* compile;
one that hung only on values training reaches made the batch wait its whole limit; the split
that followed blamed the candidate that had been probed last, after 2N-1 trainer jobs (a hang:
275 s instead of 27 s), and the reason read "internal evaluator error", which GRPO's reward
skips, so breaking the evaluator was never punished.

How a fault lands on its culprit, with `N` candidates in the batch:

- **Pre-flight** (evaluation/preflight.py, in the trainer): each candidate's artifact is
  compiled and run alone at exactly the shapes the shared program calls it with, before that
  program is compiled; one that fails there fails alone with its own reason, in the same job
  (0 extra trainer jobs), and the others are compiled without it.
- **Its own clock.** The trainer reports `active` events: the index of the candidate whose
  programs run (its probes, pre-flight, training segments) or None (the shared compile). The
  parent sums each candidate's active time while the job runs (WorkerProcess.run's ticks) and
  stops the trainer as soon as one exceeds its own limit: the limit it would have alone
  (`training_limit(plan, references, 1)`). That candidate fails ("timed out ... its own
  limit"), the others train again without it in one more job (1 extra job; a hang costs one
  limit, once). The job's own limit, one candidate limit per candidate plus one for the shared
  work, expires only after a candidate's own clock would have.
- **Deaths** (crash, memory, the job's own time limit) while a candidate's programs run: that
  candidate alone in one job, the others in another (2 extra jobs); it is blamed only when it
  fails alone. While nobody's run: the batch once more with every candidate's program compiled
  alone (`isolate`, 1 extra job), where the next failure has a culprit.
- **Evaluator faults** (`Outcome.evaluator_fault`) are what is reproducible without any
  candidate: a trainer that never started, a malformed result from the trainer (trusted code),
  and a failure with no candidate active that a control job, the same job with the task's
  baseline program as its only candidate, reproduces. They say nothing about a candidate.

So a candidate that breaks or hangs the shared program fails alone, with its own reason, after
at most 2 extra trainer jobs (at most ceil(log2 N) + 1 for N >= 2), and every other candidate
scores bit for bit as it would alone: each candidate's run is its own call of the program, so
its numbers do not depend on its batch (tests/test_batch_training.py). With the Ray executor
events arrive only with the result, so a hang there costs the job's limit before the split.

Measured on the 2-core CPU (CPU-2, shared with other jobs; smoke suite, 4500 steps, one seed,
own limit 40 s; batches of 4 with 3 honest candidates; tests/test_batch_faults.py's ones), this
code against the commit before it: a forged shape breaker 1 trainer job, 19.2 s, its own
reason (before: 7 jobs, 40.3 s, "internal evaluator error"); a training-only hang 2 jobs, one
of them stopped at the hang's own limit, 84.0 s (before: 3 jobs, two of them timed out at the
batch's limit, 96.0 s); an honest batch of 4 drifts 18.4 s, of which the pre-flight takes
~0.7 s of call-site tracing per run config and 0.1-0.5 s per candidate (1-2 s for an
optimizer).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from typing import Callable, Sequence

from metarl.evaluation import baseline_cache
from metarl.evaluation.env_shares import env_groups, group_settings, merge_outcomes
from metarl.evaluation.fidelity import rung_reason
from metarl.evaluation.near_duplicates import KnownPrograms, known_programs
from metarl.evaluation.outcome import (
    MalformedResult,
    Outcome,
    env_score,
    parse_outcome,
)
from metarl.evaluation.roles import score_roles
from metarl.evaluation.sandbox import WorkerResult
from metarl.evaluation.settings import (
    CascadeSettings,
    PlannedRun,
    Reference,
    plan_runs,
    run_configs,
)
from metarl.tasks.candidate import normalise_source

logger = logging.getLogger(__name__)

OnEvent = Callable[[dict], bool]
RunTrainer = Callable[[dict, float, OnEvent | None], WorkerResult]
TRAINER_STAGES = ("probes", "short", "full")


class CandidateClock:
    """Whose programs the trainer runs now, and for how long each candidate's have run in
    total, from the trainer's `active` and `stage` events, on this process's clock.

    Args:
        size: the batch size (valid indices are 0..size-1).
        limit_s: each candidate's own limit on its active time.
        clock: the time source (seconds).
    """

    def __init__(self, size: int, limit_s: float, clock: Callable[[], float] = time.perf_counter):
        self.limit_s = float(limit_s)
        self.clock = clock
        self.active: int | None = None  # whose programs run now
        self.since = clock()
        self.used = [0.0] * size  # active seconds so far, not counting the current stretch
        self.stages = ["probes"] * size  # the stage each candidate is in
        self.overrun: int | None = None  # who ran past its limit (the trainer was stopped)

    def index(self, value: object) -> int | None:
        """`value` when it is a candidate's index in the batch, else None."""
        valid = isinstance(value, int) and not isinstance(value, bool)
        return value if valid and 0 <= value < len(self.used) else None

    def seconds(self, index: int) -> float:
        """Candidate `index`'s active time so far."""
        current = self.clock() - self.since if self.active == index else 0.0
        return self.used[index] + current

    def observe(self, message: dict) -> bool:
        """Take one trainer message (or the sandbox's tick); True when the candidate whose
        programs run has passed its own limit (the caller then stops the trainer)."""
        event, index = message.get("event"), self.index(message.get("index"))
        stage = message.get("stage")
        if event == "active":
            now = self.clock()
            if self.active is not None:
                self.used[self.active] += now - self.since
            self.active, self.since = index, now
        if event in ("active", "stage") and index is not None and stage in TRAINER_STAGES:
            self.stages[index] = stage
        if self.active is not None and self.seconds(self.active) > self.limit_s:
            self.overrun = self.active
            return True
        return False


class BatchTraining:
    """Trains batches of traced candidates in trainer jobs and assigns every failure.

    Args:
        settings: the evaluator's cascade settings.
        platform: the JAX platform artifacts are exported for.
        run_trainer: runs one trainer job: `run_trainer(job, limit_s, on_event)`.
        batch_settings: the settings a batch's jobs carry, for its training seeds.
        clock: the time source of the candidates' clocks (seconds).
    """

    def __init__(
        self,
        settings: CascadeSettings,
        platform: str,
        run_trainer: RunTrainer,
        batch_settings: Callable[[Sequence[int]], CascadeSettings],
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.settings = settings
        self.platform = platform
        self.run_trainer = run_trainer
        self.batch_settings = batch_settings
        self.clock = clock

    def training_limit(
        self, plan: list[PlannedRun], references: dict[str, Reference], candidates: int = 1
    ) -> float:
        """Seconds for stages 2b-4 of `candidates` candidates trained together: scaled from
        the baseline's time for the same runs (`train_timeout_factor` x, at most `timeout_s`
        per candidate), at least `train_timeout_floor_s`."""
        settings = self.settings
        work = sum(references[entry.key].seconds for entry in plan if entry.stage == "full")
        per_candidate = min(settings.timeout_s, settings.train_timeout_factor * work)
        return max(settings.train_timeout_floor_s, per_candidate * candidates)

    def train_batch(self, task, ready: list, references, known, announce, slots: int) -> None:
        """Stages 2b-4 of a batch's traced candidates in trainer jobs, all at once: the task's
        own baseline program (a seed program such as PPO-clip, or a proposal that is its copy)
        in a job that verifies, probes and fingerprints it and scores it from the baseline's
        runs (`reuse`); the others in `slots` shares (`train_shares`), or, one candidate alone
        with slots to spare, its envs in groups (`train_groups`)."""
        baseline = normalise_source(task.baseline_program().source)
        copies = [c for c in ready if normalise_source(c.source) == baseline]
        trained = [c for c in ready if not any(c is copy for copy in copies)]
        groups = []
        if len(trained) == 1 and slots > 1:
            groups = group_settings(self.settings, env_groups(plan_runs(self.settings), slots))
        jobs = []
        if copies:
            logger.info("%d of the batch are %s's baseline program", len(copies), task.name)
            jobs.append(lambda: self.train(task, copies, references, known, announce, reuse=True))
        if groups:
            jobs.append(
                lambda: self.train_groups(task, trained[0], groups, references, known, announce)
            )
        elif trained:
            jobs.append(
                lambda: self.train_shares(task, trained, references, known, announce, slots)
            )
        with ThreadPoolExecutor(max(1, len(jobs)), thread_name_prefix="metarl-batch") as pool:
            for future in [pool.submit(job) for job in jobs]:
                future.result()

    def train_groups(
        self, task, candidate, groups: list[CascadeSettings], references, known, announce
    ) -> None:
        """One candidate's stages 2b-4 as one trainer job per env group at once (`groups`:
        their settings, the short run in the first; env_shares.py); the outcome merged as one
        job walking the whole plan would have stopped, and verified against the whole plan."""
        parts = [
            replace(candidate, sandbox=dict(candidate.sandbox), timings=dict(candidate.timings))
            for _ in groups
        ]

        def train(index: int) -> None:
            group = groups[index]

            def settings(seeds: Sequence[int]) -> CascadeSettings:
                return replace(
                    self.batch_settings(seeds), envs=group.envs, skip_short=group.skip_short
                )

            batches = BatchTraining(group, self.platform, self.run_trainer, settings, self.clock)
            report = lambda _part, stage: announce(candidate, stage)  # noqa: E731
            batches.train(task, [parts[index]], references, known, report)

        with ThreadPoolExecutor(len(groups), thread_name_prefix="metarl-group") as pool:
            list(pool.map(train, range(len(groups))))
        before = dict(candidate.timings)
        candidate.sandbox = {**parts[0].sandbox, "env_groups": [list(g.envs) for g in groups]}
        for part in parts:  # the trainer jobs' own timings add up; the tracer's are shared
            for key, value in part.timings.items():
                if key not in before and isinstance(value, (int, float)):
                    candidate.timings[key] = candidate.timings.get(key, 0.0) + value
        outcomes = [p.outcome or Outcome.evaluator_fault("no verdict was reached") for p in parts]
        settings = self.batch_settings(candidate.seeds.values)
        try:
            candidate.outcome = verify_outcome(
                merge_outcomes(outcomes), plan_runs(settings), references, settings
            )
        except MalformedResult as error:
            logger.error("the env groups' outcomes do not make the plan: %s", error)
            candidate.outcome = Outcome.evaluator_fault(f"malformed result ({error})")

    def train_shares(self, task, ready: list, references, known, announce, slots: int) -> None:
        """Train `ready` as `slots` contiguous shares at once (one per device or Ray task);
        one share, a single trainer job, when there is one slot."""
        shares = min(slots, len(ready))
        if shares <= 1:
            self.train(task, ready, references, known, announce)
            return
        size = -(-len(ready) // shares)
        parts = [ready[start : start + size] for start in range(0, len(ready), size)]
        with ThreadPoolExecutor(len(parts), thread_name_prefix="metarl-train") as pool:
            list(pool.map(lambda part: self.train(task, part, references, known, announce), parts))

    def job_limit(
        self, plan: list[PlannedRun], references: dict[str, Reference], size: int
    ) -> float:
        """A trainer job's wall-clock limit: one candidate limit per candidate, plus one for the
        shared work (the call sites, the shared compile). Each candidate's own clock stops it
        at its limit, so a hang is stopped by its own clock, not by this backstop, however
        the others used theirs."""
        return self.training_limit(plan, references, 1) * (size + 1)

    def train(
        self,
        task,
        batch: list,
        references: dict[str, Reference],
        known: KnownPrograms | dict[str, str],
        announce: Callable[[object, str], None],
        isolate: bool = False,
        reuse: bool = False,
    ) -> None:
        """Stages 2b-4's trusted half for `batch` (cascade._Pending candidates) in one trainer
        job; on a failure, blame whoever caused it (see the module docstring) and train the
        others again, without it.

        Args:
            task: the task.
            batch: the candidates, each with its artifact, probe seed and training seeds.
            references: the batch's references.
            known: the run's fingerprints and behaviour descriptors (near_duplicates.py
                KnownPrograms, or a fingerprint -> candidate id dict); duplicates and
                near-duplicates stop after the probes.
            announce: `announce(candidate, stage)` as a candidate enters "short" or "full".
            isolate: compile each candidate's training program alone in the trainer.
            reuse: the batch is the task's own baseline program (copies of it): the trainer
                verifies, probes and fingerprints it, and its scores are the baseline's runs
                on the batch's seeds (`baseline_scores`), not trained again.
        """
        plan = plan_runs(self.settings)
        own = self.training_limit(plan, references, 1)
        limit = self.job_limit(plan, references, len(batch))
        clock = CandidateClock(len(batch), own, self.clock)

        def on_event(message: dict) -> bool:
            index, stage = clock.index(message.get("index")), message.get("stage")
            if message.get("event") == "stage" and index is not None and stage in ("short", "full"):
                announce(batch[index], stage)
            return clock.observe(message)

        job = self._job(task, batch, batch[0].seeds, references, known, isolate)
        job["train"] = not reuse
        run = self.run_trainer(job, limit, on_event)
        for position, candidate in enumerate(batch):
            candidate.sandbox.update(
                worker_pid=run.pid,
                workdir=run.workdir,
                worker_exit=run.returncode,
                status=run.status,
                train_limit_s=limit,
                candidate_limit_s=own,
                batch={"size": len(batch), "position": position},
                trainer_jobs=candidate.sandbox.get("trainer_jobs", 0) + 1,
            )
            candidate.timings.update(run.timings)
        if run.status == "ok" and run.result.get("kind") == "evaluate":
            self._keep_call_sizes(task, batch[0].seeds.values, run.result.get("payload"))
            self._read_outcomes(run, batch, plan, references, reuse)
            return
        for part, alone in self._assign(task, batch, run, clock, references, isolate):
            self.train(task, part, references, known, announce, alone, reuse)

    def _assign(
        self, task, batch: list, run: WorkerResult, clock: CandidateClock, references, isolate
    ) -> list[tuple[list, bool]]:
        """Blame a failed job's culprit (its outcome set here), or fault the evaluator.

        Returns:
            The parts of the batch to train again, each with whether to isolate it.
        """
        failure, size = training_failure(run), len(batch)
        if run.status == "startup":  # the worker never got the job: no candidate ran
            for candidate in batch:
                candidate.outcome = Outcome.evaluator_fault(failure)
            return []
        culprit = clock.overrun if clock.overrun is not None else clock.active
        if culprit is not None:
            others = batch[:culprit] + batch[culprit + 1 :]
            if clock.overrun is None and size > 1 and not isolate:
                logger.warning("a trainer of %d died in candidate %d: %s", size, culprit, failure)
                return [([batch[culprit]], False), (others, False)]  # blamed if it fails alone
            reason = failure  # its own program, compiled alone, was running (or it is alone)
            if clock.overrun is not None:
                reason = (
                    f"timed out in stage {clock.stages[culprit]}: its programs ran "
                    f"{clock.seconds(culprit):.1f} s, more than its own limit of "
                    f"{clock.limit_s:g} s (the trainer was stopped; its batch trained without it)"
                )
            batch[culprit].outcome = Outcome.failure(clock.stages[culprit], reason)
            return [(others, isolate)] if others else []
        if size > 1 and not isolate:  # nobody's programs ran: again, each compiled alone
            logger.warning("a trainer of %d failed outside any candidate: %s", size, failure)
            return [(batch, True)]
        stage = run.stage if run.stage in TRAINER_STAGES else "probes"
        if not self._trainer_works(task, batch[0].seeds, references, isolate):
            for candidate in batch:
                candidate.outcome = Outcome.evaluator_fault(failure, stage)
            return []
        if size == 1:
            reason = f"{failure} (outside its own programs; the trainer works without it)"
            batch[0].outcome = Outcome.failure(stage, reason)
            return []
        return [(batch[: size // 2], True), (batch[size // 2 :], True)]

    def _size_keys(self, task, values: Sequence[int]) -> list[str]:
        """The call-size cache keys of the batch's training programs (settings.run_configs)."""
        configs = run_configs(self.batch_settings(values))
        return [baseline_cache.call_sizes_key(task.name, c, len(values)) for c in configs]

    def _keep_call_sizes(self, task, values: Sequence[int], payload: object) -> None:
        """Keep the call sizes a trainer traced (tasks/behaviour.py) for its later jobs; sizes
        that are malformed or missing are not kept (the next job traces them again)."""
        traced = payload.get("call_sizes") if isinstance(payload, dict) else None
        if not isinstance(traced, list):
            return
        for key, sizes in zip(self._size_keys(task, values), traced):
            data, valid = {"sizes": sizes}, baseline_cache.valid_sizes
            if valid(data) and baseline_cache.load(key, valid) is None:
                baseline_cache.save(key, data)

    def _job(self, task, batch: list, seeds, references, known, isolate: bool) -> dict:
        """The trainer job of `batch` (an `evaluate` job) on training seeds `seeds`, with the
        call sizes this machine traced before for its programs (None where it has none)."""
        known = known_programs(known)
        valid = baseline_cache.valid_sizes
        cached = [baseline_cache.load(key, valid) for key in self._size_keys(task, seeds.values)]
        return {
            "kind": "evaluate",
            "task": task.name,
            "artifacts": [c.artifact for c in batch],
            "probe_seeds": [c.train_probe_seed for c in batch],
            "known_fingerprints": known.fingerprints,
            "known_behaviours": known.behaviours,
            # from `seeds`, not the batch's first candidate: the control job has no candidate
            "settings": self.batch_settings(seeds.values).job_settings(),
            "call_sizes": [entry["sizes"] if entry else None for entry in cached],
            "platform": self.platform,
            "references": [
                {
                    "key": key,
                    "baseline_mean": r.baseline_mean,
                    "random_mean": r.random_mean,
                    "baseline_returns": r.run.get("final_returns"),  # per seed: the rungs' pairs
                }
                for key, r in references.items()
            ],
            "isolate": isolate,
        }

    def _trainer_works(self, task, seeds, references, isolate: bool) -> bool:
        """The control: whether the same job with no candidate, the task's baseline program
        (trusted; exported in the trainer) trained in their place, gives a result."""
        job = {**self._job(task, [], seeds, references, {}, isolate), "control": True}
        run = self.run_trainer(job, self.job_limit(plan_runs(self.settings), references, 1), None)
        works = run.status == "ok" and run.result.get("kind") == "evaluate"
        logger.warning("the control trainer job %s", "works" if works else training_failure(run))
        return works

    def _read_outcomes(
        self, run: WorkerResult, batch: list, plan, references, reuse: bool = False
    ) -> None:
        """Each candidate's Outcome from the trainer's result, validated and rescored here; a
        malformed result is the trusted trainer's fault, never a candidate's. With `reuse`,
        one that passed its probes is scored from the baseline's runs (`baseline_scores`)."""
        payload = run.result.get("payload")
        outcomes = payload.get("outcomes") if isinstance(payload, dict) else None
        if not isinstance(outcomes, list) or len(outcomes) != len(batch):
            logger.error("malformed trainer result: %r", str(payload)[:500])
            for candidate in batch:
                candidate.outcome = Outcome.evaluator_fault("malformed result")
            return
        for candidate, data in zip(batch, outcomes):
            try:
                outcome = parse_outcome(data)
                if (
                    reuse
                    and outcome.passed
                    and outcome.stage == "probes"
                    and not outcome.env_scores
                ):
                    outcome.env_scores, outcome.stage = baseline_scores(plan, references), "full"
                    outcome.timings.update(compile=0.0, run=0.0)
                    candidate.sandbox["runs"] = "the baseline's: the same program, seeds and layout"
                candidate.outcome = verify_outcome(
                    outcome,
                    plan,
                    references,
                    self.batch_settings(candidate.seeds.values),
                )
            except MalformedResult as error:
                logger.error("malformed trainer result: %s", error)
                candidate.outcome = Outcome.evaluator_fault(f"malformed result ({error})")


def training_failure(run: WorkerResult) -> str:
    """Why the trainer gave no usable result for its batch."""
    if run.status != "ok":
        return run.reason or f"the trainer stopped ({run.status}) in stage {run.stage}"
    payload = run.result.get("payload")
    error = payload.get("error") if isinstance(payload, dict) else None
    logger.error("trainer error: %s", payload)
    return f"the trainer failed in stage {run.stage}: {error}"


def verify_outcome(
    outcome: Outcome,
    plan: list[PlannedRun],
    references: dict[str, Reference],
    settings: CascadeSettings,
) -> Outcome:
    """Recompute every score from the raw returns and this process's own references.

    The trainer's own normalised scores, fitness and short-run verdict are replaced by the ones
    computed here; a result that does not follow the plan is malformed.

    Raises:
        MalformedResult: when the runs do not match the plan.
    """
    scored = scored_runs(plan)
    scores = []
    for index, score in enumerate(outcome.env_scores):
        if index >= len(scored) or score.env != scored[index].config.env_name:
            raise MalformedResult(f"env score {index} ({score.env}) is not the planned run")
        entry = scored[index]
        if score.total_timesteps != entry.steps or score.seeds != settings.training_seeds():
            raise MalformedResult(f"env score {index} has the wrong budget or seeds")
        if score.lr != (entry.config.lr if entry.sweep else None):
            raise MalformedResult(f"env score {index} has the wrong learning rate")
        reused = entry.stage == "short" and entry.key in {e.key for e in plan if e.stage == "full"}
        if score.stage not in ("short", "full") or (
            score.stage != entry.stage and not (reused and score.stage == "full")
        ):
            raise MalformedResult(f"env score {index} has stage {score.stage!r}")
        reference = references[entry.key]
        raw = asdict(score)
        raw["final_returns"] = raw.pop("returns")
        # a meta-RL candidate's from-scratch reference is its baseline's (the same seeds,
        # tasks and config; candidates' programs leave it out: rl/meta/loop.py)
        raw["scratch"] = reference.run.get("scratch") or raw.get("scratch")
        scores.append(
            env_score(
                raw,
                reference.baseline_mean,
                reference.random_mean,
                entry.role,
                score.stage,
                lr=score.lr,
            )
        )
    outcome.env_scores = scores
    threshold = settings.short_run_threshold
    outcome.fitness = outcome.heldout = outcome.fitness_ci = outcome.heldout_ci = None
    outcome.validation = outcome.validation_ci = None
    if outcome.passed:
        if len(scores) != len(scored):
            raise MalformedResult(f"{len(scores)} env scores for {len(scored)} planned runs")
        for entry, score in zip(scored, scores):
            if entry.stage != "short":
                continue
            if entry.rung is None:
                if score.normalised is not None and score.normalised < threshold:
                    raise MalformedResult("a passed candidate is below the short-run threshold")
            elif rung_reason(
                score.env,
                score.total_timesteps,
                entry.rung,
                score.returns,
                references[entry.key].run.get("final_returns") or [],
                references[entry.key].random_mean,
                settings.rung_bar,
                settings.rung_confidence,
                "the baseline",
            ):
                raise MalformedResult("a passed candidate is clearly below the bar at a rung")
        score_roles(outcome, settings.lr_aggregation)
    return outcome


def scored_runs(plan: list[PlannedRun]) -> list[PlannedRun]:
    """The planned segments an outcome has a score for, in order: a short run that is the
    whole run on its env appears once, as that env's "full" score (unswept: a sweep scores
    every rate's full run apart from its short row)."""
    return [
        entry
        for i, entry in enumerate(plan)
        if entry.sweep or not (i > 0 and entry.stage == "full" and entry.key == plan[i - 1].key)
    ]


def baseline_scores(plan: list[PlannedRun], references: dict[str, Reference]) -> list:
    """The scores of the task's own baseline program on a batch: its references' runs.

    The baseline program trained as a candidate is the same computation as the baseline job
    on the same seeds in the same layout (one vmapped program; rl/training.py), so it returns
    the baseline's runs bit for bit (tests/test_cascade.py; on minatar-cpu's long run the
    PPO-clip seed scored exactly 1.0 on all four games). Reading them instead of training it
    again saves a whole candidate's training: on minatar-cpu's seed batch, a 297 s trainer
    job became 19 s of probes (RESULTS.md). Its timings are zero: nothing was compiled or run.

    Returns:
        One EnvScore per `scored_runs(plan)` entry, as the trainer's `_train_group` makes
        them (rescored by `verify_outcome` like any trainer's).
    """
    full = {entry.key for entry in plan if entry.stage == "full"}
    scores = []
    for entry in scored_runs(plan):
        reference = references[entry.key]
        run = {**reference.run, "compile_s": 0.0, "run_s": 0.0}
        # an unswept short run that is the whole run scores as that env's full run
        whole = entry.stage == "short" and not entry.sweep and entry.key in full
        stage = "full" if whole else entry.stage
        lr = entry.config.lr if entry.sweep else None
        scores.append(
            env_score(run, reference.baseline_mean, reference.random_mean, entry.role, stage, lr=lr)
        )
    return scores
