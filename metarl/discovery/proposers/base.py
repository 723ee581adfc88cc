"""The contract between the discovery loop and a proposer.

The loop builds a `ProposalRequest` (the task, the parents it selected, inspirations, the best
so far, an RNG seed) and a proposer answers with a `Proposal` (source text, or a failure with a
reason). After the candidate is evaluated, the loop calls `feedback` with the outcome, so a
conversational proposer can tell the model how its program did. Proposers never evaluate code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from metarl.evaluation.outcome import Outcome
from metarl.tasks.base import Task


@dataclass
class ParentInfo:
    """What a proposer may know about an archived candidate."""

    id: str
    code: str
    name: str = ""
    thought: str = ""
    fitness: float | None = None
    outcome: Outcome | None = None  # per-env scores, stage and failure reason
    generation: int = 0


@dataclass
class ProposalRequest:
    task: Task
    parents: list[ParentInfo]  # one (mutation/rewrite/diff) or two (crossover)
    inspirations: list[ParentInfo] = field(default_factory=list)  # other good programs
    best: ParentInfo | None = None
    generation: int = 0
    island: int = 0
    rng_seed: int = 0  # the proposer's randomness for this request; a run is reproducible
    # when re-asked: one note per rejected earlier answer to this request, saying why it was
    # not evaluated (a repeat or near-duplicate of an archived program; discovery/novelty.py)
    rejected: list[str] = field(default_factory=list)
    # the run's current "what worked / what failed" notes (discovery/guidance.py) and their
    # version; None before the first (a proposer may ignore them: the mutation proposer does)
    guidance: str | None = None
    guidance_version: int | None = None


@dataclass
class LLMCall:
    """One round-trip with a language model, as archived in the `messages`/calls record."""

    model: str
    prompt: list[dict[str, str]]  # chat messages sent
    reply: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None  # None when the price is unknown
    latency_s: float = 0.0
    error: str | None = None


@dataclass
class Proposal:
    code: str | None  # None when the proposer could not produce a program
    name: str = ""
    thought: str = ""
    parent_ids: list[str] = field(default_factory=list)
    proposer: str = ""  # e.g. "mutation:constant" or "llm:openai/gpt-4o-mini"
    operator: str = ""  # edit form: mutation kind, rewrite, diff, crossover
    failure: str | None = None  # why no code, when code is None
    calls: list[LLMCall] = field(default_factory=list)
    # the best parent's training fitness when it was proposed (the incumbent's without a
    # parent): what a model bandit measures the child's improvement against; None: unknown
    parent_fitness: float | None = None


class Proposer(Protocol):
    name: str

    def propose(self, request: ProposalRequest) -> Proposal: ...

    def feedback(self, proposal: Proposal, outcome: Outcome, candidate_id: str) -> None:
        """Called once per proposal after evaluation (or after dedup/failure)."""

    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable state needed to resume exactly (RNG, dialogue position)."""

    def set_state(self, state: dict[str, Any]) -> None: ...

    def drain_messages(self) -> list[dict[str, str]]:
        """Dialogue messages ({"role", "content"}) added since the last drain. The loop writes
        them to the archive's `messages` table in the same transaction as the candidate, after
        feedback, so a resumed run continues the same conversation. [] for non-dialogue
        proposers."""

    def restore_messages(self, messages: list[dict[str, str]]) -> None:
        """On resume: the run's archived messages, in order."""
