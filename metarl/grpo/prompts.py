"""The prompts GRPO trains on: the LLM proposer's own population-mode prompts, built from an
archive, so the trained model is asked exactly what `metarl discover --proposer llm` asks it.

A *prompt source* is a discover run (by default the task's latest one in the archive): each of
its passing candidates becomes a parent of a rewrite prompt (the proposer's system prompt from
the task contract, the parent's code with its per-environment results or failure reason, the
best program so far and one inspiration), the best pairs become crossover prompts, and one
fresh prompt asks for a new program. With no discover run the task's seed programs are the
parents. The diff form is left out: its replies only make sense applied to the parent, and the
reward judges a reply on its own.

A prompt is planned once as ids (`PromptSpec`, stored in the run's state) and rendered from the
archive, so a resumed run trains on the same prompts. `heldout_prompts` of the rewrite prompts,
with parents no training prompt edits, measure the proposer before and after training.

The supervised warm start pairs each training prompt with a reply in the reply format the
system prompt asks for (JSON with thought, name and code): a passing child of the prompt's
parent where the archive has one (an improvement the search actually made), else the best
passing program the prompt does not show, else the best that is not its parent (a prompt with
no such program has no pair). Held-out parents are never targets.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from metarl.archives.store import Archive, ArchiveError
from metarl.discovery.planning import parent_info
from metarl.discovery.proposers.base import ParentInfo
from metarl.discovery.proposers.llm import prompts
from metarl.grpo.rewards import KnownPrograms
from metarl.tasks.base import Task
from metarl.tasks.candidate import source_hash

SEED_PREFIX = "seed:"  # a parent id naming a task's seed program rather than a candidate
INSPIRATIONS = 1  # other good programs shown beside the parent (prompts stay short on a CPU)
CROSSOVERS = 2  # crossover prompts from the best pairs


@dataclass(frozen=True)
class PromptSpec:
    """One prompt, as ids: what `render` needs to rebuild its text from the archive."""

    id: str
    operator: str  # rewrite, crossover or fresh
    parents: tuple[str, ...]
    inspirations: tuple[str, ...] = ()
    best: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PromptSpec":
        return cls(
            data["id"],
            data["operator"],
            tuple(data["parents"]),
            tuple(data.get("inspirations") or ()),
            data.get("best"),
        )


@dataclass(frozen=True)
class PromptPlan:
    """The run's prompts: training prompts, held-out prompts, and the source they came from."""

    source_run: str | None
    train: tuple[PromptSpec, ...]
    heldout: tuple[PromptSpec, ...]

    def to_dict(self) -> dict:
        return {
            "source_run": self.source_run,
            "train": [p.to_dict() for p in self.train],
            "heldout": [p.to_dict() for p in self.heldout],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "PromptPlan":
        return cls(
            data.get("source_run"),
            tuple(PromptSpec.from_dict(p) for p in data["train"]),
            tuple(PromptSpec.from_dict(p) for p in data["heldout"]),
        )


def source_run(archive: Archive, task: Task, run_id: str | None) -> str | None:
    """The discover run prompts come from: `run_id`, else the task's latest discover run with
    a passing candidate, else None (the seed programs).

    Raises:
        ArchiveError: `run_id` does not exist or is another task's.
    """
    if run_id is not None:
        run = archive.get_run(run_id)
        if run.get("task") != task.name:
            raise ArchiveError(f"run {run_id} is a {run.get('task')} run, not {task.name}")
        return run_id
    return archive.latest_run_of(task.name, "discovery")


def plan_prompts(
    archive: Archive, task: Task, run_id: str | None, heldout: int, rng_seed: int
) -> PromptPlan:
    """The prompts of a training run (see the module docstring).

    Args:
        archive: where the prompt source lives.
        task: the task the prompts ask for.
        run_id: the source discover run, or None for the latest (or the seed programs).
        heldout: how many rewrite prompts to keep for measuring, never trained on (at most
            half of the parents).
        rng_seed: which parents are held out.

    Returns:
        The plan; its training prompts are never empty.
    """
    source = source_run(archive, task, run_id)
    if source is None:
        ranked = [f"{SEED_PREFIX}{seed.name}" for seed in task.seed_programs()]
    else:
        ranked = [row["id"] for row in archive.passing_candidates(source)]
    rng = np.random.default_rng(rng_seed)
    held = min(int(heldout), len(ranked) // 2)
    held_ids = set(rng.choice(ranked, size=held, replace=False).tolist()) if held else set()
    trainable = [cid for cid in ranked if cid not in held_ids]
    best = trainable[0] if trainable else None

    def rewrite(cid: str) -> PromptSpec:
        others = [c for c in trainable if c not in (cid, best)][:INSPIRATIONS]
        return PromptSpec(f"rewrite:{cid}", "rewrite", (cid,), tuple(others), best)

    train = [rewrite(cid) for cid in trainable]
    pairs = [(a, b) for i, a in enumerate(trainable) for b in trainable[i + 1 :]][:CROSSOVERS]
    train += [PromptSpec(f"crossover:{a}+{b}", "crossover", (a, b), (), best) for a, b in pairs]
    inspirations = tuple(c for c in trainable if c != best)[:INSPIRATIONS]
    train.append(PromptSpec("fresh", "fresh", (), inspirations, best))
    held_specs = [rewrite(cid) for cid in ranked if cid in held_ids]
    return PromptPlan(source, tuple(train), tuple(held_specs))


def program(archive: Archive, task: Task, ref: str) -> ParentInfo:
    """A prompt's program: an archived candidate, or a seed program (`seed:NAME`)."""
    if ref.startswith(SEED_PREFIX):
        seed = task.seed_program(ref[len(SEED_PREFIX) :])
        return ParentInfo(id=ref, code=seed.source, name=seed.name, thought="a seed program")
    return parent_info(archive, ref)


def render(archive: Archive, task: Task, spec: PromptSpec) -> list[dict[str, str]]:
    """The chat messages of `spec`: the proposer's system prompt and user prompt."""
    parents = [program(archive, task, ref) for ref in spec.parents]
    inspirations = [program(archive, task, ref) for ref in spec.inspirations]
    best = program(archive, task, spec.best) if spec.best else None
    if spec.operator == "crossover":
        user = prompts.crossover_prompt(task, parents[0], parents[1], inspirations, best)
    elif spec.operator == "rewrite":
        user = prompts.rewrite_prompt(task, parents[0], inspirations, best)
    else:
        user = prompts.fresh_prompt(task, inspirations, best)
    return [
        {"role": "system", "content": prompts.system_prompt(task)},
        {"role": "user", "content": user},
    ]


def prompt_rows(archive: Archive, task: Task, specs: tuple[PromptSpec, ...]) -> list[dict]:
    """The trl dataset rows of `specs`: the conversational `prompt`, and the columns the
    reward passes on to the archive (`prompt_id`, `parent_ids` as JSON)."""
    return [
        {
            "prompt": render(archive, task, spec),
            "prompt_id": spec.id,
            "operator": spec.operator,
            "parent_ids": json.dumps([p for p in spec.parents if not p.startswith(SEED_PREFIX)]),
        }
        for spec in specs
    ]


def reply(info: ParentInfo) -> str:
    """`info` written as the proposer's reply format asks: one JSON object."""
    thought = info.thought or f"a variant that trained well (fitness {info.fitness})"
    return json.dumps({"thought": thought, "name": info.name or "program", "code": info.code})


def sft_rows(archive: Archive, task: Task, plan: PromptPlan) -> list[dict]:
    """Supervised warm-start pairs (trl's prompt-completion format), one per training prompt
    that has a target (see the module docstring)."""
    held = {ref for spec in plan.heldout for ref in spec.parents}
    pool = [ref for spec in plan.train for ref in spec.parents if ref not in held]
    pool = list(dict.fromkeys(pool + [spec.best for spec in plan.train if spec.best]))
    pool = [ref for ref in pool if ref not in held]
    rows = []
    for spec in plan.train:
        children = [
            cid
            for parent in spec.parents
            if not parent.startswith(SEED_PREFIX)
            for cid in archive.children(parent)
            if cid not in held and archive.candidate(cid)["status"] == "passed"
        ]
        shown = {*spec.parents, *spec.inspirations, spec.best}
        unseen = [ref for ref in pool if ref not in shown]
        others = [ref for ref in pool if ref not in spec.parents]
        target = (children or unseen or others or [None])[0]
        if target is None:
            continue
        answer = reply(program(archive, task, target))
        rows.append(
            {
                "prompt": render(archive, task, spec),
                "completion": [{"role": "assistant", "content": answer}],
            }
        )
    return rows


def known_programs(archive: Archive, task: Task, plan: PromptPlan) -> KnownPrograms:
    """What a completion must not copy: the prompt source's passing programs (by source and by
    behaviour) and the task's seed programs. A copy of a failed program is scored like any
    other (it fails where the original failed)."""
    known = KnownPrograms()
    for seed in task.seed_programs():
        known.hashes.setdefault(source_hash(seed.source), f"{SEED_PREFIX}{seed.name}")
    if plan.source_run is not None:
        passing = archive.passing_candidates(plan.source_run)
        known.hashes.update({row["hash"]: row["id"] for row in passing})
        ids = {row["id"] for row in passing}
        fingerprints = archive.run_fingerprints(plan.source_run)
        known.fingerprints.update({f: cid for f, cid in fingerprints.items() if cid in ids})
    return known
