"""The rows a dataset export writes, one dataclass per format (trl's column names), and the
archived example they are made from (grpo/export.py builds them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from metarl.archives.export_rows import ArchivedProposal
from metarl.evaluation.outcome import Outcome

Message = dict[str, str]


@dataclass(frozen=True)
class Example:
    """One archived candidate as a training example.

    Attributes:
        proposal: the archived candidate.
        prompt: the chat messages it was (or would have been) asked.
        completion: its reply, one assistant message.
        source: CALL or RENDERED.
        outcome: its verdict, test role removed.
    """

    proposal: ArchivedProposal
    prompt: list[Message]
    completion: list[Message]
    source: str
    outcome: Outcome


@dataclass(frozen=True)
class SFTRow:
    """A prompt-completion row of trl's SFTTrainer, with what the pair came from."""

    prompt: list[Message]
    completion: list[Message]
    candidate_id: str
    run_id: str
    source: str
    model: str | None
    stage: str | None
    fitness: float | None


@dataclass(frozen=True)
class DPOPair:
    """A preference row of trl's DPOTrainer: two siblings' replies, the better one chosen."""

    prompt: list[Message]
    chosen: list[Message]
    rejected: list[Message]
    chosen_id: str
    rejected_id: str
    parent_ids: list[str]
    measure: str  # validation, confirmed, fitness, or passed (the rejected one failed)
    chosen_score: float | None
    rejected_score: float | None
    same_prompt: bool
    source: str  # the chosen one's
    rejected_source: str


@dataclass(frozen=True)
class GRPORow:
    """A prompt row of trl's GRPOTrainer with the archived completion and its reward."""

    prompt: list[Message]
    completion: list[Message]
    reward: float
    label: str  # rewards.reward_of's: scored, duplicate, static, probes, short, full, ...
    candidate_id: str
    run_id: str
    parent_ids: list[str]
    status: str
    stage: str | None
    fitness: float | None
    source: str
    model: str | None


@dataclass
class ExportResult:
    """What an export wrote.

    Attributes:
        format: sft, dpo or grpo.
        path: the JSONL file.
        rows: rows written.
        from_calls: rows whose (chosen) prompt and reply are an archived LLM call.
        rendered: rows rendered from the archive.
        skipped: candidates of the run that are no example (a model that never answered, no
            program, a prompt that cannot be rendered).
    """

    format: str
    path: Path
    rows: int
    from_calls: int
    rendered: int
    skipped: int = 0
