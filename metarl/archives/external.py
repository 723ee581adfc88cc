"""The archive's side of external evaluations: a program scored in another project's harness
(DiscoGen's `run_main.py`: metarl/discogen/harness.py), kept beside our own evaluations.

Why a table of its own (schema version 10) and not rows of `evaluations`: an external score
was earned under someone else's protocol (DiscoGen: 8 fixed seeds, 10 learning rates, the best
rate's greedy return), so it must never enter a fitness, a selection or a leaderboard that
compares our numbers. It is shown next to them (`metarl show`, the report's "other
harnesses" section), labelled with its protocol, so a reader can see whether the two
harnesses agree.

A row names its program by the normalised source hash (tasks/candidate.py `source_hash`):
a file evaluated before it was ever archived still matches the candidate with the same code
later, and a candidate evaluated by id also records that id. Nothing here reads a test-role
number of ours; the harness's own test side is the harness's, and is labelled so.
"""

from __future__ import annotations

import json
import socket
import uuid
from dataclasses import dataclass, field

from metarl.archives.columns import decode_row, now
from metarl.archives.store import Archive


@dataclass(frozen=True)
class ExternalGame:
    """One game of an external evaluation.

    Attributes:
        env: the harness's id for it (DiscoGen: `MinAtar/Breakout`).
        candidate, candidate_std: the program's return (mean, std over the harness's seeds).
        base, base_std: the harness's base module's return on the same seeds.
        normalised: candidate / base (the harness's reference); None when undefined.
    """

    env: str
    candidate: float
    candidate_std: float
    base: float
    base_std: float
    normalised: float | None


@dataclass(frozen=True)
class ExternalEvaluation:
    """A program's score in another project's harness, as archived.

    Attributes:
        hash: the program's normalised source hash.
        task: the contract it implements (drift, optimizer).
        harness: whose harness ("discogen").
        release: the harness's version ("1.3.0").
        side: the harness's split ("train" or "test").
        protocol: everything the score depends on besides the program (seeds, rates,
            evaluation, games, config overrides).
        passed: the harness scored every game.
        stage: where it stopped ("static", "harness") or "done".
        reason: why it stopped (inert text), None when it passed.
        fitness: the mean over games of `normalised`, None unless it passed.
        games: the per-game returns.
        candidate_id: the archived candidate it was evaluated as, None for a file.
        seconds: the program's harness run.
        isolation: how it ran ("bubblewrap").
        versions: metarl's library versions when it was recorded.
        id: the row's id ("" before it is recorded).
        created_at: when it was recorded ("" before).
    """

    hash: str
    task: str
    harness: str
    release: str
    side: str
    protocol: dict
    passed: bool
    stage: str
    reason: str | None = None
    fitness: float | None = None
    games: tuple[ExternalGame, ...] = ()
    candidate_id: str | None = None
    seconds: float = 0.0
    isolation: str = ""
    versions: dict = field(default_factory=dict)
    id: str = ""
    created_at: str = ""


def record_external(archive: Archive, evaluation: ExternalEvaluation) -> str:
    """Write one external evaluation (one transaction).

    Args:
        archive: the archive.
        evaluation: the evaluation; its `id` and `created_at` are assigned here.

    Returns:
        The new row's id (`x-` and 12 hex digits).
    """
    row_id = f"x-{uuid.uuid4().hex[:12]}"
    row = {
        "id": row_id,
        "hash": evaluation.hash,
        "candidate_id": evaluation.candidate_id,
        "task": evaluation.task,
        "harness": evaluation.harness,
        "release": evaluation.release,
        "side": evaluation.side,
        "protocol": json.dumps(evaluation.protocol, sort_keys=True, default=str),
        "status": "passed" if evaluation.passed else "failed",
        "stage": evaluation.stage,
        "reason": evaluation.reason,
        "fitness": evaluation.fitness,
        "games": json.dumps([game.__dict__ for game in evaluation.games]),
        "seconds": evaluation.seconds,
        "isolation": evaluation.isolation,
        "versions": json.dumps(evaluation.versions, sort_keys=True),
        "host": socket.gethostname(),
        "created_at": now(),
    }
    with archive.transaction() as db:
        db["external_evaluations"].insert(row)
    return row_id


def external_evaluations(
    archive: Archive, hashes: list[str], candidate_ids: list[str] = ()
) -> list[ExternalEvaluation]:
    """Every external evaluation of the programs with these source hashes or of these
    candidates, oldest first.

    Args:
        archive: the archive.
        hashes: normalised source hashes.
        candidate_ids: archived candidate ids (their rows match even if the code's hash was
            computed by an older metarl).

    Returns:
        The evaluations, in the order they were recorded.
    """
    hashes, candidate_ids = list(hashes), list(candidate_ids)
    if not hashes and not candidate_ids:
        return []
    rows = archive.query(
        f"SELECT * FROM external_evaluations WHERE hash IN ({_marks(hashes)}) "
        f"OR candidate_id IN ({_marks(candidate_ids)}) ORDER BY created_at, rowid",
        (*hashes, *candidate_ids),
    )
    return [_evaluation(row) for row in rows]


def _marks(values: list) -> str:
    """SQL placeholders for `values` ("NULL" for none: `IN (NULL)` matches no row)."""
    return ", ".join("?" * len(values)) or "NULL"


def _evaluation(row: dict) -> ExternalEvaluation:
    games = tuple(ExternalGame(**game) for game in json.loads(row["games"] or "[]"))
    return ExternalEvaluation(
        hash=row["hash"],
        task=row["task"],
        harness=row["harness"],
        release=row["release"] or "",
        side=row["side"] or "",
        protocol=json.loads(row["protocol"] or "{}"),
        passed=row["status"] == "passed",
        stage=row["stage"] or "",
        reason=row["reason"],
        fitness=row["fitness"],
        games=games,
        candidate_id=row["candidate_id"],
        seconds=row["seconds"] or 0.0,
        isolation=row["isolation"] or "",
        versions=json.loads(row["versions"] or "{}"),
        id=row["id"],
        created_at=row["created_at"] or "",
    )


def run_external(archive: Archive, run_id: str) -> list[tuple[dict, ExternalEvaluation]]:
    """Run `run_id`'s candidates that have external evaluations, each with every one of them
    (matched by source hash or by candidate id), in proposal order, oldest evaluation first.

    Args:
        archive: the archive.
        run_id: the run.

    Returns:
        (the candidate's row, decoded; one of its external evaluations) pairs.
    """
    rows = archive.query(
        "SELECT c.id AS cid, e.* FROM external_evaluations e JOIN candidates c "
        "ON c.hash = e.hash OR c.id = e.candidate_id WHERE c.run_id = ? "
        "ORDER BY c.seq, e.created_at, e.rowid",
        (run_id,),
    )
    if not rows:
        return []
    ids = list(dict.fromkeys(row["cid"] for row in rows))
    candidates = {
        row["id"]: decode_row("candidates", row)
        for row in archive.query(
            f"SELECT * FROM candidates WHERE id IN ({_marks(ids)})", tuple(ids)
        )
    }
    return [(candidates[row["cid"]], _evaluation(row)) for row in rows]
