"""The reward GRPO trains the proposer on: the sandboxed cascade's verdict on each completion.

Reinforcement learning finds any way to inflate its reward, so the reward comes only from the
hardened evaluation (metarl.evaluation.cascade): the model's reply goes through the proposer's
own tolerant extraction, then the same cascade that scores `metarl discover`'s children, with
the verdict recomputed in this process from raw returns. Nothing the completion prints or
computes reaches the number.

**Staged, so a small model learns from partial success.** Each completion earns the value of
the last stage it reached (`StageRewards`, all documented here and in the README):

    no program in the reply (empty, unparseable, no contracted function)   -1.0
    a program in the reply format, refused by the static check             -0.75
    failed the probes                                                      -0.5
    a duplicate of a known program (same source or same behaviour)        -0.5
    stopped at the short run, or failed during the full run               -0.25
    scored: the normalised fitness (1.0 = the task's baseline program),
            clipped to [0, 3] so one lucky environment cannot dominate a group

Every scored program earns at least as much as any failure, and every stage passed at least as
much as the one before it.

**Reward hacks closed.** Emitting nothing earns the least. Copying the prompt's parent (or any
program the prompt source already has, the seed programs included) earns the duplicate reward,
not the copy's fitness: the verbatim PPO-clip seed scores 1.000 through the cascade, so without
this the cheapest policy would be to echo it. A program that *behaves* like a known one on the
probe batch (its fingerprint) is a duplicate too.

**Cached by source hash.** A program the run has already scored is never trained again: a
repeat gets its first verdict (the archive row says `cached_from`). Nor is one that another
run or method scored under the same evaluation key (archives/reuse.py). The reward is thus
stationary for programs the model itself found first.

**Breaking the evaluator is punished; only its own faults are left out.** A candidate that
breaks or hangs the trainer is found and blamed alone (evaluation/batch_training.py): it fails
with its own reason at the stage it broke, and earns that stage's failure reward (-0.5 in the
probes, -0.25 in training), never a skip. Only a true evaluator fault (`Outcome.fault ==
"evaluator"`: reproducible without the candidate, such as a baseline that cannot be trained, a
malformed result from the trusted trainer, a sandbox that never started, or the whole batch
raising) gets None: trl excludes it from its group's mean and spread and gives it no
advantage. Before, every trainer failure read "internal evaluator error" and was skipped, so a
proposer could learn that breaking the evaluator is never punished.

**One batched evaluation per call.** trl calls the reward once per generation batch (every
group of the step); the new programs of that call go to `Evaluator.evaluate_batch` together,
so a step pays each environment's compile once.

**Zero-spread groups.** A group whose scorable rewards are all equal has no advantage and
teaches nothing; trl then skips it (zero advantage, no gradient). Each call counts them
(`RewardStats.zero_spread`), and the run reports the fraction: the measure of a reward that is
too sparse for the model at hand.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Protocol, Sequence

from metarl.discovery.proposers.llm.extraction import ExtractionError, extract
from metarl.evaluation.outcome import Outcome, evaluator_fault
from metarl.tasks.base import Task
from metarl.tasks.candidate import source_hash

logger = logging.getLogger(__name__)

# The stages a completion can pass, in order: a program was found in the reply ("parse"), then
# the cascade's four stages. A completion's pass-rate row counts the ones it passed.
PASS_STAGES = ("parse", "static", "probes", "short", "full")


class StageRewards(NamedTuple):
    """The reward of each verdict (see the module docstring for why these values)."""

    no_program: float = -1.0
    static: float = -0.75
    probes: float = -0.5
    duplicate: float = -0.5
    short: float = -0.25
    full: float = -0.25  # failed during the full run: diverged, NaN, too slow
    fitness_floor: float = 0.0
    fitness_cap: float = 3.0


REWARDS = StageRewards()


@dataclass
class Verdict:
    """What the reward made of one completion."""

    reply: str
    code: str | None
    outcome: Outcome
    reward: float | None  # None: could not be evaluated (an evaluator fault)
    label: str  # no-program, static, probes, duplicate, short, full, scored or excluded
    name: str = ""
    thought: str = ""
    cached_from: str | None = None  # the candidate whose verdict a repeat reuses
    candidate_id: str | None = None  # set once the completion is archived
    same_as: "Verdict | None" = None  # an earlier completion of the same call, same program

    @property
    def reused_from(self) -> str | None:
        """The archived candidate whose evaluation this completion reuses, if any."""
        if self.cached_from is not None:
            return self.cached_from
        return self.same_as.candidate_id if self.same_as is not None else None

    @property
    def passed(self) -> tuple[str, ...]:
        """The PASS_STAGES this completion passed."""
        return passed_stages(self.outcome)


@dataclass
class KnownPrograms:
    """The programs a completion must not copy: by normalised-source hash and by behaviour
    fingerprint, each mapped to the label a duplicate verdict names (a candidate id)."""

    hashes: dict[str, str] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)


class Evaluates(Protocol):
    """What the reward needs of `metarl.evaluation.cascade.Evaluator`."""

    def evaluate_batch(
        self, sources: list[str], task: str, known_fingerprints: dict[str, str] | None = None
    ) -> list[Outcome]: ...


@dataclass
class RewardStats:
    """One call of the reward (one generation batch of a training step, or a measurement)."""

    step: int
    completions: int
    rewards: list[float | None]
    labels: list[str]
    passed: dict[str, int]  # PASS_STAGES -> completions that passed it
    duplicates: int
    excluded: int
    groups: int
    zero_spread: int  # groups whose scorable rewards are all equal (no signal)
    evaluated: int  # programs sent to the cascade (new to the run)
    eval_s: float
    completion_tokens: int
    started: float = 0.0  # time.monotonic() when the call began (the step's timing split)

    @property
    def scorable(self) -> int:
        return self.completions - self.excluded

    def pass_rate(self, stage: str) -> float | None:
        """Fraction of scorable completions that passed `stage`."""
        return self.passed[stage] / self.scorable if self.scorable else None

    @property
    def mean_reward(self) -> float | None:
        values = [r for r in self.rewards if r is not None]
        return sum(values) / len(values) if values else None


# -- from an outcome to a reward -------------------------------------------------------------


def passed_stages(outcome: Outcome) -> tuple[str, ...]:
    """The PASS_STAGES an outcome shows passed (a behavioural duplicate passed its probes)."""
    if outcome.passed:
        return PASS_STAGES
    reached = {
        "propose": 0,
        "dedup": 1,
        "static": 1,
        "probes": 2,
        "short": 3,
        "full": 4,
    }[outcome.stage]
    if outcome.stage == "probes" and outcome.duplicate_of:
        reached = 3
    return PASS_STAGES[:reached]


def reward_of(outcome: Outcome, rewards: StageRewards = REWARDS) -> tuple[float | None, str]:
    """The reward of one evaluated completion and its label.

    Args:
        outcome: the cascade's verdict (stage "propose" for a reply with no program, "dedup"
            for a copy of a known program).
        rewards: the value of each stage.

    Returns:
        (reward, label); reward None when the evaluator failed (label "excluded").
    """
    if evaluator_fault(outcome):
        return None, "excluded"
    if outcome.duplicate_of or outcome.stage == "dedup":
        return rewards.duplicate, "duplicate"
    if outcome.passed:
        fitness = outcome.fitness if outcome.fitness is not None else 0.0
        if not math.isfinite(fitness):
            fitness = rewards.fitness_floor
        return min(max(fitness, rewards.fitness_floor), rewards.fitness_cap), "scored"
    label = "no-program" if outcome.stage == "propose" else outcome.stage
    value = {
        "no-program": rewards.no_program,
        "static": rewards.static,
        "probes": rewards.probes,
        "short": rewards.short,
        "full": rewards.full,
    }[label]
    return value, label


def completion_text(completion: Any) -> str:
    """The reply's text from a trl completion: a string, or a conversational list of
    `{"role", "content"}` messages (the assistant's contents joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, (list, tuple)):
        return "".join(
            str(m.get("content") or "")
            for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        )
    return ""


def zero_spread_groups(rewards: Sequence[float | None], group: int) -> tuple[int, int]:
    """(groups, groups whose scorable rewards are all equal or fewer than two); consecutive
    runs of `group` rewards form a group, as trl orders a generation batch."""
    groups = zero = 0
    for start in range(0, len(rewards), max(1, group)):
        values = [r for r in rewards[start : start + group] if r is not None]
        groups += 1
        if len(values) < 2 or max(values) - min(values) < 1e-9:
            zero += 1
    return groups, zero


# -- the reward function trl calls -----------------------------------------------------------


Recorder = Callable[[list[Verdict], dict[str, list], int, str], None]


class CascadeReward:
    """The GRPO reward function: callable as trl's `reward_funcs` entry.

    Args:
        evaluator: the cascade (an `Evaluator`, open for the whole run).
        task: the task the completions write a component for.
        known: programs a completion must not copy (the prompt source, the seed programs).
        group: completions per prompt (trl's `num_generations`), for the zero-spread count.
        record: `record(verdicts, columns, step, phase)` archives a call's completions and sets
            each verdict's `candidate_id`; None archives nothing.
        rewards: the value of each stage.
        archived: `archived(code)` is the archive's earlier evaluation of a program under this
            run's evaluation key, as (outcome, candidate id), or None (archives/reuse.py): a
            program another run or method already scored is not trained again.
    """

    __name__ = "cascade"  # trl names the reward's logged metrics after it

    def __init__(
        self,
        evaluator: Evaluates,
        task: Task,
        known: KnownPrograms,
        group: int,
        record: Recorder | None = None,
        rewards: StageRewards = REWARDS,
        archived: Callable[[str], tuple[Outcome, str | None] | None] | None = None,
    ):
        self.evaluator = evaluator
        self.archived = archived
        self.task = task
        self.known = known
        self.group = int(group)
        self.record = record
        self.rewards = rewards
        self.cache: dict[str, Verdict] = {}  # source hash -> first verdict this run
        self.history: list[RewardStats] = []  # one per training call
        self.last_verdicts: list[Verdict] = []
        self.phase = "train"  # what the archive calls the completions: train, before, after

    def remember(self, verdicts: list[Verdict]) -> None:
        """Take archived verdicts (a resumed run's own) into the cache, so a program scored
        before the resume is not trained again; duplicates and faults are not remembered."""
        for verdict in verdicts:
            if verdict.code and verdict.reward is not None and verdict.label != "duplicate":
                self.cache.setdefault(source_hash(verdict.code), verdict)

    def __call__(
        self,
        prompts: list | None = None,
        completions: list | None = None,
        completion_ids: list | None = None,
        trainer_state: Any = None,
        log_metric: Callable[[str, float], None] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        """trl's reward-function contract: one reward (or None) per completion."""
        replies = [completion_text(c) for c in completions or []]
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        lengths = [len(ids) for ids in completion_ids or []]
        # the dataset's columns (trl also passes callables such as log_extra: not columns)
        table = {k: v for k, v in columns.items() if isinstance(v, list) and len(v) == len(replies)}
        table["prompt"] = list(prompts or [])
        table["completion_tokens"] = lengths
        stats = self.score(replies, table, step, sum(lengths))
        if log_metric is not None:
            for stage in PASS_STAGES:
                rate = stats.pass_rate(stage)
                if rate is not None:
                    log_metric(f"pass/{stage}", rate)
            log_metric("zero_spread", stats.zero_spread / max(1, stats.groups))
            log_metric("duplicates", stats.duplicates / max(1, stats.completions))
            log_metric("excluded", stats.excluded / max(1, stats.completions))
        return stats.rewards

    def score(
        self,
        replies: list[str],
        columns: dict[str, list] | None = None,
        step: int = 0,
        completion_tokens: int = 0,
    ) -> RewardStats:
        """Judge, archive and count a batch of replies (in trl's group order).

        Args:
            replies: the completions' text.
            columns: per-completion dataset columns (prompt ids, parents) for the archive.
            step: the optimiser steps taken by the model that wrote them.
            completion_tokens: the replies' total length in tokens (for tokens/s).

        Returns:
            The call's RewardStats (also appended to `history`).
        """
        start, started = time.perf_counter(), time.monotonic()
        verdicts, evaluated = self.judge(replies)
        if self.record is not None:
            self.record(verdicts, columns or {}, step, self.phase)
        for verdict in verdicts:
            code_hash = source_hash(verdict.code) if verdict.code else None
            scored_here = verdict.outcome.stage != "dedup" and verdict.reused_from is None
            if code_hash and verdict.reward is not None and scored_here:
                self.cache.setdefault(code_hash, verdict)
        rewards = [v.reward for v in verdicts]
        groups, zero = zero_spread_groups(rewards, self.group)
        scorable = [v for v in verdicts if v.reward is not None]
        stats = RewardStats(
            step=step,
            completions=len(verdicts),
            rewards=rewards,
            labels=[v.label for v in verdicts],
            passed={s: sum(s in v.passed for v in scorable) for s in PASS_STAGES},
            duplicates=sum(v.label == "duplicate" for v in verdicts),
            excluded=len(verdicts) - len(scorable),
            groups=groups,
            zero_spread=zero,
            evaluated=evaluated,
            eval_s=time.perf_counter() - start,
            completion_tokens=completion_tokens,
            started=started,
        )
        self.last_verdicts = verdicts
        if self.phase == "train":
            self.history.append(stats)
        logger.info(
            "step %d %s: %d completions, mean reward %s, labels %s, zero-spread %d/%d (%.1f s)",
            step,
            self.phase,
            stats.completions,
            "—" if stats.mean_reward is None else f"{stats.mean_reward:.3f}",
            {label: stats.labels.count(label) for label in sorted(set(stats.labels))},
            zero,
            groups,
            stats.eval_s,
        )
        return stats

    def judge(self, replies: list[str]) -> tuple[list[Verdict], int]:
        """The verdict on each reply; the new programs among them scored in one batch.

        Returns:
            (verdicts in order, how many programs went to the cascade).
        """
        fn = self.task.function_name
        verdicts: list[Verdict | None] = [None] * len(replies)
        pending: dict[str, list[int]] = {}  # source hash -> positions, first one evaluated
        extracted: dict[int, tuple[str, str, str]] = {}
        for position, reply in enumerate(replies):
            try:
                found = extract(reply, fn)
            except ExtractionError as error:
                outcome = Outcome.failure("propose", f"no program in the reply: {error}")
                verdicts[position] = self._verdict(reply, None, outcome)
                continue
            except Exception as error:  # a reply must never stop training: logged, archived
                logger.exception("extraction failed on a reply")
                reason = f"no program in the reply: extraction failed ({type(error).__name__})"
                verdicts[position] = self._verdict(reply, None, Outcome.failure("propose", reason))
                continue
            code = found.code
            extracted[position] = (code, found.name, found.thought)
            code_hash = source_hash(code)
            if code_hash in self.known.hashes:
                known = self.known.hashes[code_hash]
                outcome = Outcome.failure(
                    "dedup", f"the same program as candidate {known}", duplicate_of=known
                )
                verdicts[position] = self._verdict(reply, code, outcome, found.name, found.thought)
            elif code_hash in self.cache:
                first = self.cache[code_hash]
                verdicts[position] = Verdict(
                    reply,
                    code,
                    first.outcome,
                    first.reward,
                    first.label,
                    found.name,
                    found.thought,
                    cached_from=first.candidate_id,
                )
            elif (hit := self.archived(code) if self.archived else None) is not None:
                outcome, cached_from = hit
                verdict = self._verdict(reply, code, outcome, found.name, found.thought)
                verdict.cached_from = cached_from
                verdicts[position] = verdict
            else:
                pending.setdefault(code_hash, []).append(position)
        firsts = [positions[0] for positions in pending.values()]
        outcomes = self._evaluate([extracted[p][0] for p in firsts])
        for positions, outcome in zip(pending.values(), outcomes):
            first = None
            for position in positions:
                code, name, thought = extracted[position]
                verdict = self._verdict(replies[position], code, outcome, name, thought)
                verdict.same_as, first = first, first or verdict
                verdicts[position] = verdict
        return [v for v in verdicts if v is not None], len(firsts)

    def _evaluate(self, sources: list[str]) -> list[Outcome]:
        """The cascade's outcomes for `sources` (one batch); every one an evaluator fault when
        the batch itself fails, so none of them is scored as the candidate's failure."""
        if not sources:
            return []
        try:
            return self.evaluator.evaluate_batch(
                sources, self.task.name, known_fingerprints=dict(self.known.fingerprints)
            )
        except (RuntimeError, OSError) as error:  # the evaluator, not the candidates
            logger.exception("the reward's evaluation batch failed")
            reason = f"the evaluation batch failed ({error})"
            return [Outcome.evaluator_fault(reason) for _ in sources]

    def _verdict(
        self, reply: str, code: str | None, outcome: Outcome, name: str = "", thought: str = ""
    ) -> Verdict:
        reward, label = reward_of(outcome, self.rewards)
        return Verdict(reply, code, outcome, reward, label, name, thought)
