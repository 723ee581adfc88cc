"""Planning a generation: parents per child slot, one proposal request per slot, the proposals
(concurrently when the proposer kind allows it), and re-proposals when a program repeats one the
run already archived. Plain functions: what they need is passed in, the archive only read.

`plan_generation` is the whole step; it consumes the run's RNG exactly as an uninterrupted run
would, so that a resumed run plans the same generations.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from metarl.archives.store import Archive, decode_outcome
from metarl.discovery import selection
from metarl.discovery.config import DiscoverConfig
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


def deduplicate(
    proposer: Any,
    request: ProposalRequest,
    proposal: Proposal,
    known: dict[str, str],
    retries: int,
    kind: str,
) -> tuple[Proposal, int, str | None]:
    """Re-ask (up to `retries` times, with derived RNG seeds) while the proposal repeats a
    program in `known` (source hash -> candidate id). Returns the last proposal, carrying every
    attempt's LLM calls, the number of re-proposals, and the id it still duplicates (or None)."""
    attempts = [proposal]
    duplicate_of = None
    while proposal.code is not None and source_hash(proposal.code) in known:
        if len(attempts) > retries:
            duplicate_of = known[source_hash(proposal.code)]
            break
        seed = (request.rng_seed * 7919 + len(attempts)) % (2**31 - 1)
        proposal = propose_one(proposer, dataclasses.replace(request, rng_seed=seed), kind)
        attempts.append(proposal)
    proposal.calls = [c for p in attempts for c in p.calls]
    return proposal, len(attempts) - 1, duplicate_of


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
    requests = [
        ProposalRequest(
            task=task,
            parents=[parent_info(archive, p) for p in pick.parent_ids],
            inspirations=[parent_info(archive, p) for p in pick.inspiration_ids],
            best=best,
            generation=generation,
            island=pick.island,
            rng_seed=pick.rng_seed,
        )
        for pick in picks
    ]
    kind = config.proposer
    proposals = propose_all(proposer, requests, concurrency(config, len(requests)), kind)
    known = archive.run_source_hashes(run_id)
    slots = []
    for index, (pick, request, proposal) in enumerate(zip(picks, requests, proposals)):
        seq = next_seq + index
        cid = f"{run_id}-{seq}"
        proposal, retries, duplicate_of = deduplicate(
            proposer, request, proposal, known, config.dedup_retries, kind
        )
        if proposal.code is not None and duplicate_of is None:
            known[source_hash(proposal.code)] = cid
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
            )
        )
    return Plan(generation=generation, slots=slots, messages=drain_messages(proposer))
