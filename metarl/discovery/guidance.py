"""Evolving guidance: the proposer prompt's "what worked / what failed" section, rewritten every
`guidance_every` generations from what the run's archive says, so that the search learns from
its own history (as OpenEvolve's and ShinkaEvolve's evolving prompts do) instead of showing the
model the same static instructions at generation 50 as at generation 1.

At the end of every K-th generation (`write_due`, which the loop calls before it plans the
next one) the run's facts are gathered (`gather_facts`): the best few children by selection
score with a compact diff against their parent, the commonest failure reasons, and the pass
rate of each cascade stage.
An LLM proposer that offers `write_guidance` is asked to rewrite the notes from them and the
previous version; any failure of that call (an error, an empty or overlong reply) falls back to
the deterministic rule summary (`rule_guidance`), which is also what an offline run writes.

What the summary may read is the selection side of the archive only: training fitness,
confirmed fitness and validation scores, fates and programs (`archives.guidance.summary_rows`
selects named columns; per-env scores come through `planning.parent_info`, the outcome's
`selection_view`). No test-role number can reach the notes, nor through them a prompt.

Each version is archived (`archives.guidance`) in one transaction with the run's state, the
planning step puts the latest version into every request, and each child's row records the
version its proposal saw (`meta.guidance`). A resumed run reads the archived version: the
version due after a generation is written once, and a process killed before that write
commits computes it again, never a second one.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from metarl.archives.guidance import (
    Guidance,
    latest_guidance,
    record_guidance,
    summary_rows,
)
from metarl.archives.store import Archive
from metarl.discovery import planning, selection
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.proposers.base import LLMCall
from metarl.discovery.proposers.llm import prompts
from metarl.discovery.proposers.llm.extraction import json_objects
from metarl.discovery.runs import RunBook
from metarl.evaluation.outcome import EVALUATOR_FAULT, STAGES
from metarl.evaluation.text import clean
from metarl.tasks.candidate import normalise_source

logger = logging.getLogger(__name__)

TOP_PROGRAMS = 3  # children shown as what worked
TOP_FAILURES = 4  # failure reasons shown as what failed
RULE_LIMIT = 1500  # characters of the rule summary
LLM_LIMIT = 2000  # the most characters of a model's notes accepted (asked for fewer)
DIFF_LINES = 12  # changed lines of a program's diff in the facts
REASON_CHARS = 160  # characters of a failure reason shown
LINE_CHARS = 100  # characters of a changed line shown
RULE = "rule"
# what the archive's `calls` table keeps of an LLMCall
CALL_COLUMNS = (
    "model",
    "prompt",
    "reply",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "latency_s",
    "error",
)


@dataclass(frozen=True)
class ProgramNote:
    """A passed child as the summary sees it.

    Attributes:
        id, name: the candidate.
        score: its selection score (confirmed fitness where there is one, else training).
        validation: its validation score, when it was raced; None otherwise.
        parent_id, parent_score: its first parent and that parent's selection score.
        changes: the changed lines of its unified diff against the parent ("-"/"+" first).
        thought: the proposer's stated idea (cleaned, truncated).
        env_scores: training env -> normalised score (the outcome's selection view).
    """

    id: str
    name: str
    score: float
    validation: float | None
    parent_id: str | None
    parent_score: float | None
    changes: list[str]
    thought: str = ""
    env_scores: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class FailureNote:
    """A failure reason and how many children stopped for it (texts differing only in their
    numbers count as one; the first one's text is shown)."""

    stage: str
    reason: str
    count: int


@dataclass(frozen=True)
class StageRate:
    """How many children reached a cascade stage and how many of them got past it."""

    stage: str
    reached: int
    passed: int


@dataclass(frozen=True)
class GuidanceFacts:
    """What a guidance version is written from: the run's selection-side record.

    Attributes:
        generation: the generation just finished.
        children: children archived so far (seeds not counted).
        passed: how many of them passed every stage.
        worked: the best few passed children, best first.
        failures: the commonest failure reasons, commonest first.
        stages: pass rate per stage, in cascade order (stages no child reached left out).
        previous: the current version's text, or None before the first.
    """

    generation: int
    children: int
    passed: int
    worked: list[ProgramNote]
    failures: list[FailureNote]
    stages: list[StageRate]
    previous: str | None = None


# -- gathering the facts -----------------------------------------------------------------------


def gather_facts(archive: Archive, run_id: str, generation: int) -> GuidanceFacts:
    """The facts of run `run_id` after `generation`, from its archived candidates.

    Args:
        archive: the archive.
        run_id: the run.
        generation: the generation just finished.

    Returns:
        The facts (no test-role number among them).
    """
    rows = summary_rows(archive, run_id)
    by_id = {row["id"]: row for row in rows}
    children = [row for row in rows if not row["is_seed"]]
    judged = [row for row in children if not _evaluator_fault(row)]
    passed = [row for row in judged if row["status"] == "passed" and row["fitness"] is not None]
    previous = latest_guidance(archive, run_id)
    return GuidanceFacts(
        generation=generation,
        children=len(children),
        passed=len(passed),
        worked=[_program_note(archive, row, by_id) for row in _best(passed)],
        failures=_failures(judged),
        stages=_stage_rates(judged),
        previous=previous.text if previous else None,
    )


def _score(row: dict) -> float:
    return selection.score_of(row["fitness"], row["confirmed_fitness"])


def _best(passed: list[dict]) -> list[dict]:
    """The best TOP_PROGRAMS passed children by selection score, one per program."""
    seen: set[str] = set()
    out = []
    for row in sorted(passed, key=lambda r: (-_score(r), r["seq"])):
        if row["code"] in seen:
            continue
        seen.add(row["code"])
        out.append(row)
    return out[:TOP_PROGRAMS]


def _program_note(archive: Archive, row: dict, by_id: dict[str, dict]) -> ProgramNote:
    parent_ids = row["parent_ids"] or []
    parent = by_id.get(parent_ids[0]) if parent_ids else None
    info = planning.parent_info(archive, row["id"])  # per-env scores: the selection view
    envs = {}
    if info.outcome is not None:
        envs = {s.env: s.normalised for s in info.outcome.env_scores if s.role == "train"}
    parent_score = None
    if parent is not None and parent["status"] == "passed" and parent["fitness"] is not None:
        parent_score = _score(parent)
    return ProgramNote(
        id=row["id"],
        name=_inert(row["name"] or row["id"], 60),
        score=_score(row),
        validation=row["validation"],
        parent_id=parent["id"] if parent is not None else None,
        parent_score=parent_score,
        changes=changed_lines(parent["code"] if parent else "", row["code"] or ""),
        thought=_inert(row["thought"] or "", 240),
        env_scores=envs,
    )


def changed_lines(before: str, after: str, limit: int = DIFF_LINES) -> list[str]:
    """The changed lines of a unified diff from `before` to `after`, compared without comments,
    docstrings and formatting (`normalise_source`), so only what the program does shows:
    removed lines with "-", added with "+", each cleaned and truncated, at most `limit` of them
    (the cut is said).

    Args:
        before: the parent's source ("" for none: every line is added).
        after: the child's source.
        limit: the most lines kept.

    Returns:
        The lines, in diff order.
    """
    lines = []
    before = normalise_source(before) if before else ""
    after = normalise_source(after)
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")) or not line[1:].strip():
            continue
        lines.append(line[0] + " " + _inert(line[1:].strip(), LINE_CHARS))
    if len(lines) > limit:
        lines = lines[:limit] + [f"... {len(lines) - limit} more changed lines"]
    return lines


def _evaluator_fault(row: dict) -> bool:
    """An evaluator's fault says nothing about the program: not counted."""
    return row["status"] == "fault" or (row["reason"] or "").startswith(EVALUATOR_FAULT)


def _failures(children: list[dict]) -> list[FailureNote]:
    """The commonest (stage, reason) of the failed children; reasons that differ only in
    their numbers are one."""
    counts: Counter = Counter()
    first: dict[tuple[str, str], str] = {}
    for row in children:
        if row["status"] == "passed" or not row["reason"]:
            continue
        stage = row["stage"] or "?"
        key = (stage, re.sub(r"\d+(?:\.\d+)?", "#", row["reason"])[:REASON_CHARS])
        counts[key] += 1
        first.setdefault(key, row["reason"])
    ranked = sorted(counts.items(), key=lambda item: -item[1])[:TOP_FAILURES]
    return [
        FailureNote(stage, _inert(first[(stage, key)], REASON_CHARS), count)
        for (stage, key), count in ranked
    ]


def _stage_rates(children: list[dict]) -> list[StageRate]:
    """Per stage (STAGES order), how many children reached it and got past it: a child that
    stopped at a stage reached every stage before it; a passed one got past its last."""
    order = {stage: i for i, stage in enumerate(STAGES)}
    reached = Counter()
    stopped = Counter()
    for row in children:
        last = order.get(row["stage"] or "", len(STAGES) - 1)
        for stage in STAGES[: last + 1]:
            reached[stage] += 1
        if row["status"] != "passed":
            stopped[STAGES[last]] += 1
    return [
        StageRate(stage, reached[stage], reached[stage] - stopped[stage])
        for stage in STAGES
        if reached[stage]
    ]


def _inert(text: str, limit: int) -> str:
    """Untrusted text (a name, a reason, a line of code) as the notes quote it: one line,
    control characters visible, secrets redacted, no backticks, at most `limit` characters."""
    text = clean(" ".join(str(text).split()).replace("`", "'"), limit=1 << 16) or ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- writing the text --------------------------------------------------------------------------


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _worked_line(note: ProgramNote) -> str:
    line = f"- `{note.name}` ({note.id}): score {_num(note.score)}"
    if note.parent_score is not None:
        delta = note.score - note.parent_score
        line += f", {delta:+.3f} over its parent {note.parent_id}"
    if note.validation is not None:
        line += f"; validation {_num(note.validation)}"
    changes = [c for c in note.changes if c[:1] in "+-"][:4]
    if changes:
        line += ". Change: " + " | ".join(f"`{c}`" for c in changes)
    return line


def _stages_line(stages: list[StageRate]) -> str:
    shown = [s for s in stages if s.stage not in ("propose", "dedup") or s.passed < s.reached]
    return "- pass rate by stage: " + ", ".join(f"{s.stage} {s.passed}/{s.reached}" for s in shown)


def rule_guidance(facts: GuidanceFacts, limit: int = RULE_LIMIT) -> str:
    """The offline notes: deterministic short bullet lists under "What worked:" and "What
    failed:", bounded to `limit` characters (bullets that do not fit are left out).

    Args:
        facts: the run's facts (`gather_facts`).
        limit: the most characters.

    Returns:
        The notes.
    """
    worked = [_worked_line(note) for note in facts.worked]
    if not worked:
        worked = ["- no child has passed yet: small, principled edits of the seeds are safest"]
    failed = [f"- {f.count} stopped at `{f.stage}`: {f.reason}" for f in facts.failures]
    if facts.stages:
        failed.append(_stages_line(facts.stages))
    if not facts.failures:
        failed.insert(0, f"- no failures among {facts.children} children so far")
    header = f"After generation {facts.generation}: {facts.passed} of {facts.children} passed."
    text = header
    for title, bullets in (("What worked:", worked), ("What failed:", failed)):
        block = "\n" + title
        for bullet in bullets:
            bullet = bullet if len(bullet) <= limit // 3 else bullet[: limit // 3 - 3] + "..."
            if len(text) + len(block) + len(bullet) + 1 > limit - 40:
                break
            block += "\n" + bullet
        text += block
    return text[:limit]


def facts_text(facts: GuidanceFacts) -> str:
    """The facts as a model reads them (longer than the notes: the diffs and per-env scores
    are given in full, within their bounds)."""
    lines = [
        f"Generation {facts.generation} finished; {facts.passed} of {facts.children} children "
        "passed every stage. Scores are normalised: 1.0 is the baseline PPO, higher is better.",
        "",
        "Best children by selection score:",
    ]
    for note in facts.worked:
        lines.append(_worked_line(note).split(". Change:")[0])
        if note.env_scores:
            envs = ", ".join(f"{env} {_num(v)}" for env, v in note.env_scores.items())
            lines.append(f"  training envs: {envs}")
        if note.thought:
            lines.append(f"  idea: {note.thought}")
        lines.extend("  " + change for change in note.changes)
    if not facts.worked:
        lines.append("- none passed yet")
    lines += ["", "Commonest failure reasons:"]
    lines += [f"- {f.count}x at {f.stage}: {f.reason}" for f in facts.failures] or ["- none"]
    if facts.stages:
        lines += ["", _stages_line(facts.stages)[2:]]
    return "\n".join(lines)


def accept_reply(reply: str | None, facts: GuidanceFacts) -> tuple[str, str | None]:
    """The notes a model's reply gives, or the rule notes when it gives none usable.

    Args:
        reply: the model's reply text (None: the call failed).
        facts: what the rule notes are written from.

    Returns:
        (the notes, None) when the reply is usable, else (the rule notes, why not).
    """
    if reply is None:
        return rule_guidance(facts), "the call failed"
    text = reply.strip()
    for _method, obj in json_objects(text):
        if isinstance(obj.get("guidance"), str):
            text = obj["guidance"].strip()
            break
    else:
        if text.startswith("{"):
            return rule_guidance(facts), 'the reply has no "guidance" text'
    if not text:
        return rule_guidance(facts), "the reply was empty"
    if len(text) > LLM_LIMIT:
        return rule_guidance(facts), f"the reply was {len(text)} characters (over {LLM_LIMIT})"
    return clean(text, limit=LLM_LIMIT) or "", None


def llm_guidance(facts: GuidanceFacts, client: Any, request_seed: int = 0) -> tuple[str, LLMCall]:
    """One LLM call rewriting the notes from `facts`; the rule notes when it fails.

    Args:
        facts: the run's facts.
        client: an LLMClient (`chat(messages, request_seed=...)` returning an LLMCall).
        request_seed: picks the ensemble's model reproducibly.

    Returns:
        The notes and the call (its `reply` says what the model answered).
    """
    call = client.chat(
        prompts.guidance_request(facts_text(facts), facts.previous), request_seed=request_seed
    )
    text, problem = accept_reply(call.reply, facts)
    if problem:
        logger.warning(
            "the guidance call failed (%s: %s); using the rule notes", problem, call.error
        )
    return text, call


# -- the loop's hook ---------------------------------------------------------------------------


def due(config: DiscoverConfig, generation: int, latest: Guidance | None) -> bool:
    """Whether a version is written after `generation`: every `guidance_every`-th one (0: never),
    unless the run already has one written after it (a resumed run)."""
    every = int(config.guidance_every or 0)
    if every <= 0 or generation < 1 or generation % every:
        return False
    return latest is None or latest.generation < generation


def compose(
    archive: Archive, run_id: str, generation: int, proposer: Any
) -> tuple[Guidance, list[LLMCall]]:
    """The next version of run `run_id`'s notes after `generation`: written by the proposer's
    model when it has `write_guidance`, else (or when that fails) by the rule.

    Args:
        archive: the archive.
        run_id: the run.
        generation: the generation just finished.
        proposer: the run's proposer.

    Returns:
        The version (not yet archived) and the LLM calls made for it.
    """
    latest = latest_guidance(archive, run_id)
    version = latest.version + 1 if latest else 1
    facts = gather_facts(archive, run_id, generation)
    write = getattr(proposer, "write_guidance", None)
    if write is None:
        return Guidance(version, generation, rule_guidance(facts), RULE), []
    try:
        reply, call = write(facts_text(facts), facts.previous, request_seed=generation)
    except Exception:  # plug-in code: a bug there costs this version its model, not the run
        logger.exception("the proposer's write_guidance failed; using the rule notes")
        return Guidance(version, generation, rule_guidance(facts), RULE), []
    calls = [call] if call is not None else []
    text, problem = accept_reply(reply, facts)
    if problem:
        error = f" ({call.error})" if call is not None and call.error else ""
        logger.warning(
            "guidance version %d: the model's notes were not used: %s%s; using the rule notes",
            version,
            problem,
            error,
        )
        return Guidance(version, generation, text, RULE), calls
    model = call.model if call is not None else ""
    return Guidance(version, generation, text, f"llm:{model}"), calls


def write_due(
    archive: Archive, config: DiscoverConfig, proposer: Any, book: RunBook, generation: int
) -> Guidance | None:
    """After `generation`, before the next is planned: when a version is due, compose it and
    archive it with the run's state (`book.update()`, its cost included) in one transaction.

    The loop calls it when it is about to plan generation `generation + 1`, so notes no
    generation would read (after a run's last) cost no call, and a run resumed with a larger
    budget still writes the version due after its last generation.

    Args:
        archive: the archive.
        config: the run's config (`guidance_every`).
        proposer: the run's proposer.
        book: the run's bookkeeping (its state is what is saved).
        generation: the generation just finished.

    Returns:
        The version written, or None when none was (the caller then saves the state itself).
    """
    if not due(config, generation, latest_guidance(archive, book.run_id)):
        return None
    guidance, calls = compose(archive, book.run_id, generation, proposer)
    book.state.cost_usd += sum(c.cost_usd for c in calls if c.cost_usd is not None)
    rows = [{column: getattr(c, column) for column in CALL_COLUMNS} for c in calls]
    if not record_guidance(archive, book.run_id, guidance, calls=rows, run_update=book.update()):
        return None
    logger.info(
        "guidance version %d written after generation %d (%s)",
        guidance.version,
        generation,
        guidance.source,
    )
    return guidance


__all__ = [
    "FailureNote",
    "Guidance",
    "GuidanceFacts",
    "ProgramNote",
    "StageRate",
    "accept_reply",
    "compose",
    "facts_text",
    "gather_facts",
    "llm_guidance",
    "rule_guidance",
    "write_due",
]
