"""A discovery run's resumable state, as stored (JSON) in the archive's `runs.state`.

`RunState` holds the counters, the islands, the numpy RNG state, the proposer's state, the
budget spent and the current generation's `Plan`: every child slot with its parents, RNG seed,
pre-assigned candidate id and proposal. `to_dict` writes exactly the keys (and `STATE_VERSION`)
that earlier versions of the loop stored, and `restore` reads them, so `metarl resume` works on
any archive written since that version.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from metarl.discovery.proposers.base import LLMCall, Proposal

STATE_VERSION = 1


def proposal_to_dict(proposal: Proposal) -> dict:
    data = dataclasses.asdict(proposal)
    if data.get("parent_fitness") is None:  # unknown: the stored format stays as it was
        data.pop("parent_fitness", None)
    return data


def proposal_from_dict(data: dict) -> Proposal:
    data = dict(data)
    data["calls"] = [LLMCall(**c) for c in data.get("calls", [])]
    return Proposal(**data)


@dataclass
class Slot:
    """One planned child: where it comes from and what the proposer answered."""

    slot: int  # position in the generation; children are archived in this order
    id: str  # the candidate id, assigned before evaluation
    seq: int
    island: int
    parent_ids: list[str]
    inspiration_ids: list[str]
    rng_seed: int
    proposal: Proposal
    duplicate_of: str | None = None  # an archived candidate with the same source
    retries: int = 0  # re-proposals made because the proposal repeated an archived program
    # why it is settled as `duplicate_of`'s duplicate when its program is only nearly the same
    # (discovery/novelty.py); None: the same program
    duplicate_reason: str | None = None
    near_duplicates: int = 0  # proposals for this slot rejected as code near-duplicates
    # the guidance version its proposal saw (discovery/guidance.py); None: before the first
    guidance: int | None = None

    @property
    def cost_usd(self) -> float:
        """The known cost of the LLM calls made for this slot (retries included)."""
        return sum(c.cost_usd for c in self.proposal.calls if c.cost_usd is not None)

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["proposal"] = proposal_to_dict(self.proposal)
        # written once set: the format of a slot without near-duplicates or guidance stays as
        # it was
        for key in ("duplicate_reason", "near_duplicates", "guidance"):
            if not data[key]:
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Slot":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["proposal"] = proposal_from_dict(data["proposal"])
        return cls(**values)


@dataclass
class Plan:
    """A generation, planned and proposed; written before any of its children is evaluated."""

    generation: int
    slots: list[Slot]
    # dialogue drained from the proposer while planning; archived with the next child
    messages: list[dict] = field(default_factory=list)
    # a curriculum's draw for this generation (rl/environments/curriculum.py `Draw` as a dict:
    # seeds, replay, indices) and the training environments it names; None without a curriculum
    draw: dict | None = None
    train_envs: list[str] | None = None

    def to_dict(self) -> dict:
        data = {
            "generation": self.generation,
            "slots": [s.to_dict() for s in self.slots],
            "messages": list(self.messages),
        }
        if self.draw is not None:  # a run without a curriculum keeps the format it had
            data["draw"], data["train_envs"] = self.draw, self.train_envs
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        return cls(
            generation=data["generation"],
            slots=[Slot.from_dict(s) for s in data.get("slots") or []],
            messages=list(data.get("messages") or []),
            draw=data.get("draw"),
            train_envs=data.get("train_envs"),
        )


@dataclass
class RunState:
    version: int = STATE_VERSION
    phase: str = "seeds"  # seeds | generations
    generation: int = 0  # the last finished generation
    next_seq: int = 0  # the next candidate's sequence number (its id is `<run>-<seq>`)
    planned: int = 0  # children planned so far (the candidate budget counts these)
    islands: dict | None = None  # selection.Islands.to_state()
    incumbent: str | None = None
    plan: Plan | None = None  # the generation being evaluated, or None between generations
    rng: dict | None = None  # the numpy bit generator's state
    elapsed_s: float = 0.0  # wall time summed over sessions
    cost_usd: float = 0.0  # known LLM cost summed over the run
    proposer: dict[str, Any] | None = None  # the proposer's get_state()
    seed_ids: list[str] = field(default_factory=list)
    # the run's secret pool of training seeds (evaluation/seeds.py): kept here so a resumed run
    # draws from the same pool (and reuses its cached baselines); never shown or prompted
    seed_pool: list[int] | None = None
    # the curriculum (`Curriculum.to_dict`) and, per generation, what it drew and its buffer
    # ({generation, replay, levels, scores, buffer: [[seed, score, staleness]...]}; the report)
    curriculum: dict | None = None
    curriculum_history: list[dict] = field(default_factory=list)
    # near-duplicates rejected before training (evaluations saved): proposals whose code was
    # nearly an archived program's (counted when planned), candidates stopped after the probes
    # as behaving nearly like one (counted when archived, in the same transaction)
    near_duplicates_code: int = 0
    near_duplicates_behaviour: int = 0
    # the incumbent as selection decided it, after the seed programs and after each generation
    # that changed it: {generation, id, seq: the last candidate scored when it was decided}
    # (the report's incumbent line: archives/report_rows.py); absent until the first one
    incumbents: list[dict] = field(default_factory=list)
    # the challengers raced so far, in order: a race's number spends the run's selection error
    # (evaluation/statistics.py race_plan); absent until the first race
    races: list[str] = field(default_factory=list)
    # challengers whose contest an evaluator fault stopped: id -> {incumbent, attempts}
    # (races.py: raced again after the next generation); absent until the first such fault
    voided: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["plan"] = self.plan.to_dict() if self.plan is not None else None
        if self.curriculum is None:  # a run without a curriculum keeps the format it had
            del data["curriculum"], data["curriculum_history"]
        for key in ("near_duplicates_code", "near_duplicates_behaviour"):  # likewise, until
            if not data[key]:  # a near-duplicate was rejected
                del data[key]
        if not data["incumbents"]:  # likewise, until the seed programs are scored
            del data["incumbents"]
        if not data["races"]:  # likewise, until the first race
            del data["races"]
        if not data["voided"]:  # likewise, until an evaluator fault stops a contest
            del data["voided"]
        return data

    @classmethod
    def restore(cls, data: dict | None) -> "RunState | None":
        """The state stored as `data`; None when it is not one this version can resume."""
        if not data or data.get("version") != STATE_VERSION:
            return None
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["plan"] = Plan.from_dict(data["plan"]) if data.get("plan") else None
        values["seed_ids"] = list(data.get("seed_ids") or [])
        values["curriculum_history"] = list(data.get("curriculum_history") or [])
        values["incumbents"] = list(data.get("incumbents") or [])
        values["races"] = [str(cid) for cid in data.get("races") or []]
        values["voided"] = {
            str(cid): {"incumbent": str(entry["incumbent"]), "attempts": int(entry["attempts"])}
            for cid, entry in (data.get("voided") or {}).items()
        }
        return cls(**values)
