"""What a training-dataset export reads of a run (grpo/export.py): each candidate's program, its
fate and its selection scores beside the LLM call whose reply it came from, in one query.

Why a narrow query of its own: a dataset row must never carry a test-role number, so the
columns that hold one (`heldout`, `confirmed_heldout`, `final_heldout` and their intervals) are
never selected; the one column that mixes roles, the archived `outcome`, is handed on as data
for the export to reduce to its selection view. The reply is the candidate's last *answered*
call (a retry after a 429 archives a call without one; a repair or a re-proposal after a
duplicate archives a later one whose reply the program came from). `calls` counts every call,
so a candidate proposed by a model that never answered is told apart from one no model wrote
(a seed, the mutation proposer, an ES export).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from metarl.archives.store import Archive

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArchivedProposal:
    """One candidate of a run as a dataset export sees it (no test-role score).

    Attributes:
        id, seq, run_id: the candidate.
        code, name, thought: its program, as archived (None code: the proposal had none).
        parent_ids: its parents, in order (empty for a seed).
        is_seed: a seed program of the run.
        status, stage, reason: its fate (passed, failed, duplicate, no_code, fault).
        fitness: its training fitness (None unless it passed).
        confirmed_fitness: its training fitness on more seeds, where confirmed.
        validation: its validation-role score, where validated.
        outcome: the archived Outcome's data (all roles: reduce it with `selection_view`).
        proposer, operator, method: what wrote it.
        calls: how many LLM calls it has (answered or not).
        model, prompt, reply: its last answered call (None when it has none); `prompt` is the
            decoded list of chat messages, or None when the stored text is not a JSON list.
    """

    id: str
    seq: int
    run_id: str
    code: str | None
    name: str
    thought: str
    parent_ids: tuple[str, ...]
    is_seed: bool
    status: str
    stage: str | None
    reason: str | None
    fitness: float | None
    confirmed_fitness: float | None
    validation: float | None
    outcome: dict | None
    proposer: str
    operator: str
    method: str
    calls: int
    model: str | None
    prompt: list | None
    reply: str | None


_PROPOSALS = """
SELECT c.id, c.seq, c.run_id, c.code, c.name, c.thought, c.parent_ids, c.is_seed, c.status,
       c.stage, c.reason, c.fitness, c.confirmed_fitness, c.validation, c.outcome, c.proposer,
       c.operator, c.method,
       (SELECT count(*) FROM calls n WHERE n.candidate_id = c.id) AS calls,
       k.model, k.prompt, k.reply
FROM candidates c
LEFT JOIN calls k ON k.id = (
    SELECT max(a.id) FROM calls a
    WHERE a.candidate_id = c.id AND a.reply IS NOT NULL AND a.reply != ''
)
WHERE c.run_id = ?
ORDER BY c.seq
"""


def _json(text: str | None, what: str, cid: str):
    """`text` decoded, or None (logged) when it is not JSON."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        logger.warning("candidate %s: its %s is not JSON; left out", cid, what)
        return None


def run_proposals(archive: Archive, run_id: str) -> list[ArchivedProposal]:
    """Every candidate of run `run_id`, by seq, with its last answered LLM call.

    Args:
        archive: the archive.
        run_id: the run (not checked here: `Archive.get_run` says when there is none).

    Returns:
        The run's candidates, seeds included.
    """
    out = []
    for row in archive.query(_PROPOSALS, (run_id,)):
        cid = row["id"]
        prompt = _json(row["prompt"], "prompt", cid)
        outcome = _json(row["outcome"], "outcome", cid)
        out.append(
            ArchivedProposal(
                id=cid,
                seq=row["seq"],
                run_id=row["run_id"],
                code=row["code"],
                name=row["name"] or "",
                thought=row["thought"] or "",
                parent_ids=tuple(_json(row["parent_ids"], "parent list", cid) or ()),
                is_seed=bool(row["is_seed"]),
                status=row["status"] or "",
                stage=row["stage"],
                reason=row["reason"],
                fitness=row["fitness"],
                confirmed_fitness=row["confirmed_fitness"],
                validation=row["validation"],
                outcome=outcome if isinstance(outcome, dict) else None,
                proposer=row["proposer"] or "",
                operator=row["operator"] or "",
                method=row["method"] or "discovery",
                calls=row["calls"],
                model=row["model"],
                prompt=prompt if isinstance(prompt, list) else None,
                reply=row["reply"],
            )
        )
    return out
