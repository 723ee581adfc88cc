"""Planning a generation: parents per child slot, one proposal request per slot, the proposals
(concurrently when the proposer kind allows it), and re-proposals when a program repeats one the
run already archived, or nearly repeats one that trained (novelty.py). Plain functions: what
they need is passed in, the archive only read.

`plan_generation` is the whole step; it consumes the run's RNG exactly as an uninterrupted run
would, so that a resumed run plans the same generations.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, NamedTuple

import numpy as np

from metarl.archives.guidance import latest_guidance
from metarl.archives.near_duplicates import run_trained_programs
from metarl.archives.store import Archive, decode_outcome
from metarl.discovery import selection
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.novelty import CodeIndex, near_duplicate_reason, rejection_note
from metarl.discovery.pool import DaemonPool
from metarl.discovery.proposers import PROPOSERS
from metarl.discovery.proposers.base import ParentInfo, Proposal, ProposalRequest
from metarl.discovery.state import Plan, Slot
from metarl.tasks.base import Task
from metarl.tasks.candidate import source_hash

logger = logging.getLogger(__name__)


# -- what selection and the proposer see of archived candidates --------------------------------


def score(archive: Archive, cid: str, row: dict | None = None) -> float:
    """The number selection compares: the confirmed fitness when there is one."""
    row = row or archive.candidate(cid)
    return selection.score_of(row["fitness"], row["confirmed_fitness"])


def members(archive: Archive, islands: selection.Islands) -> dict[str, selection.Member]:
    """Every island member (sorted by id) as selection sees it."""
    out = {}
    for cid in sorted({c for m in islands.members for c in m}):
        row = archive.candidate(cid)
        out[cid] = selection.Member(
            cid,
            score(archive, cid, row),
            selection.code_tokens(row["code"] or ""),
            row["generation"] or 0,
        )
    return out


def parent_info(archive: Archive, cid: str) -> ParentInfo:
    """A parent as the proposer sees it: its selection view (no test-role number)."""
    row = archive.candidate(cid)
    outcome = decode_outcome(row)
    return ParentInfo(
        id=cid,
        code=row["code"],
        name=row["name"] or "",
        thought=row["thought"] or "",
        fitness=row["fitness"],
        outcome=outcome.selection_view() if outcome is not None else None,
        generation=row["generation"] or 0,
    )


# -- proposing ---------------------------------------------------------------------------------


def propose_one(proposer: Any, request: ProposalRequest, kind: str) -> Proposal:
    """The proposer's answer to `request`, or a Proposal without code saying why there is none
    (a proposer that raises is archived as such, never fatal). `kind` labels a nameless one."""
    try:
        proposal = proposer.propose(request)
    except Exception as error:  # a proposer bug or an API failure: archived, not fatal
        logger.info("the proposer raised %s: %s", type(error).__name__, error)
        return Proposal(
            code=None,
            parent_ids=[p.id for p in request.parents],
            proposer=getattr(proposer, "name", kind),
            failure=f"the proposer raised {type(error).__name__}: {error}",
        )
    if proposal is None:
        return Proposal(
            code=None,
            parent_ids=[p.id for p in request.parents],
            proposer=getattr(proposer, "name", ""),
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


def concurrency(config: DiscoverConfig, count: int) -> int:
    """How many of `count` requests may be proposed at once: `max_concurrency` for a proposer
    kind that allows it in population mode, else one at a time (a dialogue is sequential)."""
    if count <= 1 or config.mode == "conversation":
        return 1
    kind = PROPOSERS.get(config.proposer)
    limit = config.max_concurrency if kind is not None and kind.concurrent else 1
    return max(1, min(count, limit))


def propose_all(
    proposer: Any, requests: list[ProposalRequest], workers: int, kind: str
) -> list[Proposal]:
    """One proposal per request, in order; `workers` at a time."""
    if workers <= 1:
        return [propose_one(proposer, r, kind) for r in requests]
    pool = DaemonPool(workers)
    futures = [pool.submit(propose_one, proposer, r, kind) for r in requests]
    try:
        return [future.result() for future in futures]
    finally:
        pool.shutdown()


class Deduplicated(NamedTuple):
    """A slot's proposal after deduplication."""

    proposal: Proposal  # the last answer, carrying every attempt's LLM calls
    retries: int  # re-proposals made
    duplicate_of: str | None  # the candidate it still (nearly) repeats, or None
    reason: str | None  # why, when it only nearly repeats it (None: the same program)
    near_duplicates: int  # answers rejected as code near-duplicates (evaluations saved)


def repeat_of(
    code: str, known: dict[str, str], index: CodeIndex | None, threshold: float
) -> tuple[str, float | None] | None:
    """The candidate `code` repeats: (id, None) for the same normalised source (`known`:
    source hash -> id), (id, similarity) for a program of `index` at least `threshold`
    similar (novelty.py; threshold 0 or no index: not checked); None when it is new."""
    digest = source_hash(code)
    if digest in known:
        return known[digest], None
    if index is None or threshold <= 0 or not len(index):
        return None
    cid, similarity = index.nearest(code, at_least=threshold)
    if cid is not None and similarity >= threshold:
        return cid, similarity
    return None


def deduplicate(
    proposer: Any,
    request: ProposalRequest,
    proposal: Proposal,
    known: dict[str, str],
    retries: int,
    kind: str,
    index: CodeIndex | None = None,
    threshold: float = 0.0,
) -> Deduplicated:
    """Re-ask (up to `retries` times, with derived RNG seeds) while the proposal repeats a
    program in `known` (source hash -> candidate id) or is a near-duplicate (similarity at
    least `threshold`) of one in `index`; each re-ask's request says why the earlier answers
    were rejected (`ProposalRequest.rejected`)."""
    attempts, notes, near = [proposal], [], 0
    duplicate_of = reason = None
    while proposal.code is not None:
        match = repeat_of(proposal.code, known, index, threshold)
        if match is None:
            break
        cid, similarity = match
        near += similarity is not None
        if len(attempts) > retries:
            duplicate_of = cid
            if similarity is not None:
                reason = near_duplicate_reason(cid, similarity, threshold)
            break
        notes.append(rejection_note(cid, similarity))
        seed = (request.rng_seed * 7919 + len(attempts)) % (2**31 - 1)
        again = dataclasses.replace(request, rng_seed=seed, rejected=[*request.rejected, *notes])
        proposal = propose_one(proposer, again, kind)
        attempts.append(proposal)
    proposal.calls = [c for p in attempts for c in p.calls]
    return Deduplicated(proposal, len(attempts) - 1, duplicate_of, reason, near)


def drain_messages(proposer: Any) -> list[dict]:
    """The dialogue the proposer added since the last drain; [] when draining fails."""
    try:
        return proposer.drain_messages() or []
    except Exception:  # a proposer is plug-in code: its bug loses messages, not the run
        logger.exception("the proposer's drain_messages failed; its new messages are lost")
        return []


# -- the whole step ----------------------------------------------------------------------------


def plan_generation(
    archive: Archive,
    proposer: Any,
    config: DiscoverConfig,
    task: Task,
    rng: np.random.Generator,
    *,
    run_id: str,
    generation: int,
    count: int,
    next_seq: int,
    islands_state: dict,
    incumbent: str | None,
) -> Plan:
    """Generation `generation`'s `count` child slots, proposed and deduplicated against every
    program of run `run_id`; candidate ids are `<run_id>-<seq>` from `next_seq` on."""
    islands = selection.Islands.from_state(islands_state)
    picks = selection.plan_children(
        rng,
        islands,
        members(archive, islands),
        count,
        crossover_probability=config.crossover,
        tournament_size=config.tournament,
        novelty_weight=config.novelty,
        inspirations=config.inspirations,
        first_island=(generation - 1) * config.children % len(islands),
    )
    best = parent_info(archive, incumbent) if incumbent else None
    guidance = latest_guidance(archive, run_id)  # the run's notes so far (guidance.py)
    version = guidance.version if guidance else None
    requests = [
        ProposalRequest(
            task=task,
            parents=[parent_info(archive, p) for p in pick.parent_ids],
            inspirations=[parent_info(archive, p) for p in pick.inspiration_ids],
            best=best,
            generation=generation,
            island=pick.island,
            rng_seed=pick.rng_seed,
            guidance=guidance.text if guidance else None,
            guidance_version=version,
        )
        for pick in picks
    ]
    kind = config.proposer
    proposals = propose_all(proposer, requests, concurrency(config, len(requests)), kind)
    known = archive.run_source_hashes(run_id)
    threshold = config.code_novelty
    programs = CodeIndex(run_trained_programs(archive, run_id)) if threshold > 0 else None
    slots = []
    for index, (pick, request, proposal) in enumerate(zip(picks, requests, proposals)):
        seq = next_seq + index
        cid = f"{run_id}-{seq}"
        deduplicated = deduplicate(
            proposer, request, proposal, known, config.dedup_retries, kind, programs, threshold
        )
        proposal, retries, duplicate_of = deduplicated[:3]
        if proposal.code is not None and duplicate_of is None:
            known[source_hash(proposal.code)] = cid
            if programs is not None:  # a later slot of this generation must not repeat it
                programs.add(cid, proposal.code)
        slots.append(
            Slot(
                slot=index,
                id=cid,
                seq=seq,
                island=pick.island,
                parent_ids=pick.parent_ids,
                inspiration_ids=pick.inspiration_ids,
                rng_seed=pick.rng_seed,
                proposal=proposal,
                duplicate_of=duplicate_of,
                retries=retries,
                guidance=version,
                duplicate_reason=deduplicated.reason,
                near_duplicates=deduplicated.near_duplicates,
            )
        )
    return Plan(generation=generation, slots=slots, messages=drain_messages(proposer))
