"""Training datasets from the archive: `metarl export RUN --format sft|dpo|grpo`.

Every proposal a run archived is a labelled example for training a proposer: the prompt it was
asked, the reply it gave, and what the sandboxed evaluator made of the program. This module
turns a run into the three layouts trl's trainers read, as JSON lines that
`datasets.load_dataset("json", data_files=PATH)` loads (conversational messages throughout):

- **sft** (`SFTTrainer`, prompt-completion): `{"prompt": [messages], "completion":
  [{"role": "assistant", "content": reply}]}`, one row per candidate whose program passed
  (`min_stage`, a `rewards.PASS_STAGES` name, keeps those that passed that stage instead:
  "static" keeps every well-formed program). Duplicates and evaluator faults are left out.
- **dpo** (`DPOTrainer`, preference): `{"prompt", "chosen", "rejected"}`, pairs of *siblings*
  (children of the same parents) where the chosen one scored more than `margin` above the
  rejected one (normalised fitness units, 1.0 = the task's baseline). Each pair is compared on
  the most trusted score both siblings have: the validation-role score, else the confirmed
  training fitness (more seeds), else the training fitness (`measure` says which). A sibling
  that failed ranks below every passing one, whatever the margin (`measure` "passed"); two
  failed siblings are not ordered. Siblings from one parent were often asked in different
  prompts (later generations show other inspirations and guidance): the pair's `prompt` is
  the chosen one's, and `same_prompt` says whether the rejected reply answered the same text.
  A test-role score is never read: the archive query does not select one, and the outcome is
  reduced to its selection view.
- **grpo** (`GRPOTrainer`): `{"prompt", "completion", "reward", ...}` for every candidate with a
  verdict; `reward` is `rewards.reward_of` of the archived outcome (the staged reward GRPO
  trains on), `label` its stage. trl reads `prompt` and passes the other columns to reward
  functions as keyword arguments, so a reward function can read the archived verdict.

**Where prompt and reply come from** (the `source` column). A candidate an LLM wrote has its
archived call: the messages sent and the reply received, as they were ("call"). A candidate no
model wrote (a seed, the offline mutation proposer, an ES export) gets the prompt
`metarl train-proposer` would ask for it, rendered from the archive (grpo/prompts.py: a rewrite
prompt of its parent, a crossover prompt of two, a fresh prompt for a seed) and its program
written in the LLM proposer's reply format (`prompts.reply`) ("rendered"), so a run of the
offline demo exports a usable dataset too. A candidate whose model never answered has no reply
to learn from and is left out (`ExportResult.skipped`).

**Hostile text.** Prompts and replies hold model and candidate text. Rows are written with
`json.dumps(..., ensure_ascii=True)`: every control or bidi character is a `\\u` escape, inert
when the file is printed, and exactly the archived text once decoded. Nothing of the run's
config (its API base, credentials) is written; replies are archived already redacted.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Iterable, Sequence

from metarl.archives.export_rows import ArchivedProposal, run_proposals
from metarl.archives.store import Archive, ArchiveError
from metarl.discovery.proposers.base import ParentInfo
from metarl.errors import USAGE, MetarlError
from metarl.evaluation.outcome import STAGES, Outcome
from metarl.grpo import prompts as prompt_plan
from metarl.grpo.rewards import PASS_STAGES, passed_stages, reward_of
from metarl.grpo.rows import DPOPair, Example, ExportResult, GRPORow, Message, SFTRow
from metarl.tasks import UnknownTask, get_task
from metarl.tasks.base import Task

logger = logging.getLogger(__name__)

FORMATS = ("sft", "dpo", "grpo")
MARGIN = 0.05  # dpo: the least score difference (normalised fitness) a preference needs
MIN_STAGE = "full"  # sft: the stage a program must have passed (full: it passed every stage)
CALL, RENDERED = "call", "rendered"  # where an example's prompt and reply come from
PASSING = "passed"
FAILING = ("failed", "no_code")  # statuses a dpo pair may reject (a verdict on the reply)


class ExportError(MetarlError):
    """A run has nothing to export in the asked format, or the file cannot be written."""


class ExportOptionError(MetarlError, ValueError):
    """A bad export option (format, margin, stage) or a bad dataset file; one line."""

    exit_code = USAGE


# -- examples ----------------------------------------------------------------------------------


def _message(item: object) -> Message | None:
    """A chat message as trl reads it (role and content strings), or None."""
    if not isinstance(item, dict) or not isinstance(item.get("role"), str):
        return None
    content = item.get("content")
    return {"role": item["role"], "content": content if isinstance(content, str) else ""}


def _assistant(text: str) -> list[Message]:
    return [{"role": "assistant", "content": text}]


def _verdict(proposal: ArchivedProposal) -> Outcome:
    """The candidate's outcome without its test role; rebuilt from its columns when the row
    holds none."""
    if proposal.outcome is not None:
        try:
            return Outcome.from_dict(proposal.outcome).selection_view()
        except (TypeError, ValueError) as error:
            logger.warning(
                "candidate %s: unreadable outcome (%s); read from its columns", proposal.id, error
            )
    stage = proposal.stage if proposal.stage in STAGES else "propose"
    if proposal.status == "duplicate":
        stage = "dedup"
    return Outcome(
        passed=proposal.status == PASSING,
        stage=stage,
        reason=proposal.reason,
        fitness=proposal.fitness,
        fault="evaluator" if proposal.status == "fault" else None,
    )


class _Renderer:
    """The prompts `metarl train-proposer` would ask for candidates no model wrote, by their
    parents (rendered once per parent set)."""

    def __init__(self, archive: Archive, task: Task | None):
        self.archive, self.task = archive, task
        self._cache: dict[tuple[str, ...], list[Message] | None] = {}

    def prompt(self, parents: tuple[str, ...]) -> list[Message] | None:
        """The rewrite (one parent), crossover (two) or fresh (none) prompt; None when the
        task has no proposer prompt or a parent is not in the archive."""
        if self.task is None:
            return None
        if parents not in self._cache:
            operator = ("fresh", "rewrite")[len(parents)] if len(parents) < 2 else "crossover"
            spec = prompt_plan.PromptSpec(
                f"{operator}:{'+'.join(parents)}", operator, tuple(parents[:2])
            )
            try:
                self._cache[parents] = prompt_plan.render(self.archive, self.task, spec)
            except ArchiveError as error:
                logger.warning("no prompt for parents %s: %s", parents, error.message)
                self._cache[parents] = None
        return self._cache[parents]


def _task_of(run: dict) -> Task | None:
    """The run's task, or None (logged) when it has no proposer prompt (an LPG run)."""
    try:
        return get_task(run.get("task") or "")
    except UnknownTask:
        logger.warning(
            "run %s: task %r has no proposer prompt; candidates no model wrote are left out",
            run["id"],
            run.get("task"),
        )
        return None


def run_examples(archive: Archive, run_id: str) -> tuple[list[Example], int]:
    """Every candidate of run `run_id` that makes a training example, by seq.

    Args:
        archive: the archive.
        run_id: the run.

    Returns:
        (examples, how many candidates were skipped: a model that never answered, no program,
        an archived prompt that is not a message list, a prompt that cannot be rendered).

    Raises:
        ArchiveError: no run `run_id`.
    """
    run = archive.get_run(run_id)
    renderer: _Renderer | None = None
    examples, skipped = [], 0
    for proposal in run_proposals(archive, run_id):
        if proposal.calls:
            messages = [_message(m) for m in proposal.prompt or []]
            if proposal.reply is None or not messages or None in messages:
                skipped += 1
                continue
            prompt, completion, source = messages, _assistant(proposal.reply), CALL
        else:
            if proposal.code is None:
                skipped += 1
                continue
            renderer = renderer or _Renderer(archive, _task_of(run))
            rendered = renderer.prompt(proposal.parent_ids)
            if rendered is None:
                skipped += 1
                continue
            info = ParentInfo(
                id=proposal.id,
                code=proposal.code,
                name=proposal.name,
                thought=proposal.thought,
                fitness=proposal.fitness,
            )
            prompt, completion = rendered, _assistant(prompt_plan.reply(info))
            source = RENDERED
        examples.append(Example(proposal, prompt, completion, source, _verdict(proposal)))
    return examples, skipped


# -- the three layouts -------------------------------------------------------------------------


def _check_stage(min_stage: str) -> None:
    if min_stage not in PASS_STAGES:
        raise ExportOptionError(
            f"unknown stage {min_stage!r}; choose one of: {', '.join(PASS_STAGES)}"
        )


def _sft(examples: Iterable[Example], min_stage: str) -> list[SFTRow]:
    _check_stage(min_stage)
    return [
        SFTRow(
            prompt=e.prompt,
            completion=e.completion,
            candidate_id=e.proposal.id,
            run_id=e.proposal.run_id,
            source=e.source,
            model=e.proposal.model,
            stage=e.proposal.stage,
            fitness=e.proposal.fitness,
        )
        for e in examples
        if e.proposal.status not in ("duplicate", "fault") and min_stage in passed_stages(e.outcome)
    ]


def sft_rows(archive: Archive, run_id: str, min_stage: str = MIN_STAGE) -> list[SFTRow]:
    """The run's supervised pairs: one per candidate whose program passed `min_stage`.

    Args:
        archive: the archive.
        run_id: the run.
        min_stage: a `rewards.PASS_STAGES` name; "full" keeps programs that passed every stage.

    Returns:
        The rows, by seq.

    Raises:
        ArchiveError: no such run. ExportOptionError: an unknown stage.
    """
    return _sft(run_examples(archive, run_id)[0], min_stage)


# the scores a dpo pair may be compared on, most trusted first: (measure, candidate's column)
MEASURES = (
    ("validation", "validation"),
    ("confirmed", "confirmed_fitness"),
    ("fitness", "fitness"),
)


def _finite(value: float | None) -> float | None:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def compared(better: ArchivedProposal, worse: ArchivedProposal) -> tuple[str, float, float] | None:
    """(measure, score of `better`, score of `worse`) on the most trusted score both passing
    candidates have (MEASURES); None when they share none."""
    for measure, column in MEASURES:
        a, b = _finite(getattr(better, column)), _finite(getattr(worse, column))
        if a is not None and b is not None:
            return measure, a, b
    return None


def _pair(chosen: Example, rejected: Example, margin: float) -> DPOPair | None:
    """The preference of `chosen` over its sibling `rejected`, or None when there is none."""
    if chosen.completion == rejected.completion:
        return None
    if rejected.proposal.status == PASSING:
        scores = compared(chosen.proposal, rejected.proposal)
        if scores is None or not scores[1] > scores[2] + margin:
            return None
        measure, high, low = scores
    else:
        measure, high, low = "passed", _finite(chosen.proposal.fitness), None
    return DPOPair(
        prompt=chosen.prompt,
        chosen=chosen.completion,
        rejected=rejected.completion,
        chosen_id=chosen.proposal.id,
        rejected_id=rejected.proposal.id,
        parent_ids=list(chosen.proposal.parent_ids),
        measure=measure,
        chosen_score=high,
        rejected_score=low,
        same_prompt=chosen.prompt == rejected.prompt,
        source=chosen.source,
        rejected_source=rejected.source,
    )


def _check_margin(margin: float) -> None:
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise ExportOptionError(f"--margin must be a number >= 0, not {margin!r}")


def _dpo(examples: Iterable[Example], margin: float) -> list[DPOPair]:
    _check_margin(margin)
    families: dict[tuple[str, ...], list[Example]] = {}
    for example in examples:
        status = example.proposal.status
        if example.proposal.parent_ids and (status == PASSING or status in FAILING):
            families.setdefault(example.proposal.parent_ids, []).append(example)
    pairs = []
    for siblings in families.values():
        for chosen in siblings:
            if chosen.proposal.status != PASSING:
                continue
            for rejected in siblings:
                if rejected is not chosen:
                    pair = _pair(chosen, rejected, margin)
                    if pair is not None:
                        pairs.append(pair)
    return pairs


def dpo_pairs(archive: Archive, run_id: str, margin: float = MARGIN) -> list[DPOPair]:
    """The run's preference pairs of siblings (see the module docstring for the order).

    Args:
        archive: the archive.
        run_id: the run.
        margin: the least score difference a pair of passing siblings needs (>= 0).

    Returns:
        The pairs, grouped by parents in order of their first child, then by the chosen and
        the rejected one's seq.

    Raises:
        ArchiveError: no such run. ExportOptionError: a bad margin.
    """
    return _dpo(run_examples(archive, run_id)[0], margin)


def _grpo(examples: Iterable[Example]) -> list[GRPORow]:
    rows = []
    for e in examples:
        reward, label = reward_of(e.outcome)
        if reward is None:  # an evaluator fault says nothing about the reply
            continue
        rows.append(
            GRPORow(
                prompt=e.prompt,
                completion=e.completion,
                reward=float(reward),
                label=label,
                candidate_id=e.proposal.id,
                run_id=e.proposal.run_id,
                parent_ids=list(e.proposal.parent_ids),
                status=e.proposal.status,
                stage=e.proposal.stage,
                fitness=_finite(e.proposal.fitness),
                source=e.source,
                model=e.proposal.model,
            )
        )
    return rows


def grpo_rows(archive: Archive, run_id: str) -> list[GRPORow]:
    """The run's prompts with their archived completion and its GRPO reward
    (`rewards.reward_of`), evaluator faults left out.

    Raises:
        ArchiveError: no such run.
    """
    return _grpo(run_examples(archive, run_id)[0])


# -- files -------------------------------------------------------------------------------------


def _json_ready(value):
    """`value` with every non-finite float as None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_ready(item) for item in value]
    return value


def write_jsonl(rows: Sequence, path: str | os.PathLike) -> int:
    """Write `rows` (dataclasses) to `path`, one JSON object a line, ASCII-escaped (hostile
    text stays inert), through a temporary file so a failed write leaves no half file.

    Returns:
        The rows written.

    Raises:
        ExportError: the file cannot be written.
    """
    path = Path(path)
    scratch = path.with_name(f".{path.name}.tmp")
    try:
        with open(scratch, "w", encoding="ascii") as out:
            for row in rows:
                data = _json_ready(asdict(row))
                out.write(json.dumps(data, ensure_ascii=True, allow_nan=False) + "\n")
        os.replace(scratch, path)
    except OSError as error:
        scratch.unlink(missing_ok=True)
        raise ExportError(f"cannot write {path}: {error.strerror or error}") from None
    return len(rows)


_NOTHING = {
    "sft": "no candidate with a reply passed the {min_stage} stage",
    "dpo": "no passing child beats a sibling of the same parents by more than {margin}",
    "grpo": "no candidate has both a reply and a verdict",
}
_HINTS = {
    "sft": "try --min-stage static, or a run with passing children",
    "dpo": "try a smaller --margin, or a run with several children per parent",
    "grpo": "export a run whose candidates were evaluated",
}


def export_dataset(
    archive: Archive,
    run_id: str,
    fmt: str,
    path: str | os.PathLike,
    *,
    margin: float = MARGIN,
    min_stage: str = MIN_STAGE,
) -> ExportResult:
    """Write run `run_id`'s `fmt` dataset to `path`.

    Args:
        archive: the archive.
        run_id: the run.
        fmt: one of FORMATS.
        path: the JSONL file to write.
        margin: dpo's least score difference.
        min_stage: sft's stage a program must have passed.

    Returns:
        What was written.

    Raises:
        ExportOptionError: an unknown format or a bad option. ArchiveError: no such run.
        ExportError: the run has no row in that format, or the file cannot be written.
    """
    if fmt not in FORMATS:
        raise ExportOptionError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    _check_stage(min_stage)
    _check_margin(margin)
    examples, skipped = run_examples(archive, run_id)
    if fmt == "sft":
        rows: list = _sft(examples, min_stage)
    elif fmt == "dpo":
        rows = _dpo(examples, margin)
    else:
        rows = _grpo(examples)
    if not rows:
        reason = _NOTHING[fmt].format(min_stage=min_stage, margin=margin)
        raise ExportError(f"run {run_id} has no {fmt} rows: {reason}", hint=_HINTS[fmt])
    written = write_jsonl(rows, path)
    from_calls = sum(1 for row in rows if row.source == CALL)
    return ExportResult(fmt, Path(path), written, from_calls, written - from_calls, skipped)


# -- reading an sft export back ----------------------------------------------------------------


def _messages(value: object) -> list[Message] | None:
    if not isinstance(value, list) or not value:
        return None
    messages = [_message(item) for item in value]
    return None if None in messages else messages


def read_sft_rows(path: str | os.PathLike) -> list[dict]:
    """The prompt-completion rows of an sft export, as `grpo.sft.warm_start` takes them
    (`{"prompt": [messages], "completion": [messages]}`; the other columns dropped).

    Args:
        path: a `metarl export RUN --format sft` file (JSON lines).

    Returns:
        The rows, in file order.

    Raises:
        ExportOptionError: the file is missing, not JSON lines, a row lacks a conversational
            prompt or completion, or it has no row.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ExportOptionError(f"cannot read the sft data {path}: {error}") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            raise ExportOptionError(f"{path}:{number} is not a JSON object") from None
        prompt = _messages(data.get("prompt")) if isinstance(data, dict) else None
        completion = _messages(data.get("completion")) if isinstance(data, dict) else None
        if prompt is None or completion is None:
            raise ExportOptionError(
                f"{path}:{number} has no conversational prompt and completion",
                hint="write one with `metarl export RUN --format sft`",
            )
        rows.append({"prompt": prompt, "completion": completion})
    if not rows:
        raise ExportOptionError(f"the sft data {path} has no rows")
    return rows
