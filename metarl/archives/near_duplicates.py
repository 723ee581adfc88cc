"""What near-duplicate rejection compares a new candidate with (discovery/novelty.py for code,
evaluation/near_duplicates.py for behaviour): a run's behaviour descriptors, read from the
archived outcomes' JSON without a column of their own, and the programs of a run that got to
training."""

from __future__ import annotations

import json
import logging

from metarl.archives.store import Archive

logger = logging.getLogger(__name__)


def run_behaviours(archive: Archive, run_id: str, limit: int | None = None) -> dict[str, list]:
    """Candidate id -> behaviour descriptor (the outcome's `behaviour`; null entries stand
    for NaN) of run `run_id`'s candidates that have one, duplicates excluded, by seq: what
    the cascade compares a new candidate's behaviour with, for near-duplicates. With
    `limit`, only the latest `limit` of them (a trainer job's size stays bounded)."""
    rows = archive.query(
        "SELECT id, json_extract(outcome, '$.behaviour') AS behaviour FROM candidates "
        "WHERE run_id = ? AND fingerprint IS NOT NULL AND status != 'duplicate' "
        "AND CASE WHEN json_valid(outcome) THEN json_type(outcome, '$.behaviour') END "
        "= 'array' "
        "ORDER BY seq DESC LIMIT ?",
        (run_id, -1 if limit is None else int(limit)),
    )
    out: dict[str, list] = {}
    for row in reversed(rows):
        try:
            descriptor = json.loads(row["behaviour"])
        except (TypeError, ValueError):  # not JSON: compared with nothing
            logger.warning("candidate %s: its behaviour is not JSON; skipped", row["id"])
            continue
        out[row["id"]] = descriptor
    return out


def run_trained_programs(archive: Archive, run_id: str) -> dict[str, str]:
    """Candidate id -> program of run `run_id`'s candidates that got to training (passed,
    or failed in the short or full run), by seq: what a new proposal's code is compared
    with for near-duplicates (a program that failed before training is left out: a small
    fix of it is what its proposer is asked for)."""
    rows = archive.query(
        "SELECT id, code FROM candidates WHERE run_id = ? AND code IS NOT NULL "
        "AND status IN ('passed', 'failed') AND stage IN ('short', 'full') ORDER BY seq",
        (run_id,),
    )
    return {row["id"]: row["code"] for row in rows}
