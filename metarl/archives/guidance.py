"""The archive's side of a discovery run's evolving guidance: its versions (the `guidance`
table, schema version 9) and the reads the guidance and its report are built from.

Every few generations the loop rewrites the proposer prompt's "what worked / what failed"
section from the run's archive (discovery/guidance.py). Each rewrite is a new version, written
in one transaction with the run's state (as a candidate is, `Archive.record_candidate`), so a
process killed at any instant leaves either both or neither; a resumed run then reads the
latest version here and shows the proposer the same text, never a recomputed one. Writing a
version that exists is a no-op: (run, version) is the table's key.

The reads here select named columns only: the summary may see a candidate's training,
confirmed and validation scores, its fate and its program, never a test-role number (the
`heldout`, `confirmed_heldout` and `final_*` columns, the outcome's test envs).
"""

from __future__ import annotations

from dataclasses import dataclass

from metarl.archives.columns import decode_row, encode_row, now
from metarl.archives.store import Archive


@dataclass(frozen=True)
class Guidance:
    """One version of a run's guidance.

    Attributes:
        version: 1, 2, ... in the order written.
        generation: the generation after which it was written (the next one first sees it).
        text: the "what worked / what failed" section.
        source: "rule" (the offline summary) or "llm:<model>" (the model that rewrote it).
    """

    version: int
    generation: int
    text: str
    source: str


@dataclass(frozen=True)
class VersionOutcome:
    """How the children proposed under one guidance version did (the report's numbers).

    Attributes:
        version: the version they saw; None for children planned before the first one.
        children: how many.
        passed: how many passed every stage.
        best: the best selection score among them (confirmed fitness where there is one, else
            training fitness); None when none passed.
    """

    version: int | None
    children: int
    passed: int
    best: float | None

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.children if self.children else None


# what the summary may read of a candidate: no test-role column, no outcome
SUMMARY_COLUMNS = (
    "id",
    "seq",
    "name",
    "code",
    "thought",
    "parent_ids",
    "generation",
    "is_seed",
    "status",
    "stage",
    "reason",
    "fitness",
    "confirmed_fitness",
    "validation",
    "cached_from",
)


def _guidance(row: dict) -> Guidance:
    return Guidance(
        version=int(row["version"]),
        generation=int(row["generation"]),
        text=row["text"] or "",
        source=row["source"] or "",
    )


def record_guidance(
    archive: Archive,
    run_id: str,
    guidance: Guidance,
    *,
    calls: list[dict] | None = None,
    run_update: dict | None = None,
) -> bool:
    """Write a version of run `run_id`'s guidance, the LLM calls that wrote it and the run's new
    state, atomically; a version the run already has is left as it is (and its calls and the
    state are not written either: the caller's copy of them is a recomputation).

    Args:
        archive: the archive.
        run_id: the run.
        guidance: the version to write.
        calls: its LLM calls as the `calls` table takes them (no candidate: `candidate_id` NULL).
        run_update: the run's columns to write with it (`RunBook.update()`), or None.

    Returns:
        Whether it was written (False: the version existed).
    """
    stamp = now()
    with archive.transaction() as db:
        if archive.query(
            "SELECT 1 FROM guidance WHERE run_id = ? AND version = ?",
            (run_id, guidance.version),
        ):
            return False
        db["guidance"].insert(
            {
                "run_id": run_id,
                "version": guidance.version,
                "generation": guidance.generation,
                "text": guidance.text,
                "source": guidance.source,
                "created_at": stamp,
            }
        )
        for call in calls or []:
            record = {"run_id": run_id, "candidate_id": None, "created_at": stamp, **call}
            db["calls"].insert(encode_row("calls", record))
        if run_update:
            archive.update_run(run_id, **run_update)
    return True


def latest_guidance(archive: Archive, run_id: str) -> Guidance | None:
    """Run `run_id`'s latest guidance version, or None before its first."""
    rows = archive.query(
        "SELECT * FROM guidance WHERE run_id = ? ORDER BY version DESC LIMIT 1", (run_id,)
    )
    return _guidance(rows[0]) if rows else None


def run_guidance(archive: Archive, run_id: str) -> list[Guidance]:
    """Every guidance version of run `run_id`, oldest first."""
    rows = archive.query("SELECT * FROM guidance WHERE run_id = ? ORDER BY version", (run_id,))
    return [_guidance(row) for row in rows]


def summary_rows(archive: Archive, run_id: str) -> list[dict]:
    """Run `run_id`'s candidates (seeds included) as the guidance summary may read them:
    SUMMARY_COLUMNS only, decoded, in proposal order.

    Args:
        archive: the archive.
        run_id: the run.

    Returns:
        One dict per candidate.
    """
    rows = archive.query(
        f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM candidates WHERE run_id = ? ORDER BY seq",
        (run_id,),
    )
    return [decode_row("candidates", row) for row in rows]


def outcomes_by_version(archive: Archive, run_id: str) -> list[VersionOutcome]:
    """How run `run_id`'s children did under each guidance version they saw (`meta.guidance`),
    children without one (planned before the first version, or by an older metarl) first.

    Args:
        archive: the archive.
        run_id: the run.

    Returns:
        One VersionOutcome per version seen, in version order.
    """
    rows = archive.query(
        "SELECT json_extract(meta, '$.guidance') AS version, count(*) AS children, "
        "sum(status = 'passed') AS passed, "
        "max(CASE WHEN status = 'passed' THEN coalesce(confirmed_fitness, fitness) END) AS best "
        "FROM candidates WHERE run_id = ? AND is_seed = 0 "
        "GROUP BY version ORDER BY version IS NOT NULL, version",
        (run_id,),
    )
    return [
        VersionOutcome(
            version=None if row["version"] is None else int(row["version"]),
            children=int(row["children"]),
            passed=int(row["passed"] or 0),
            best=row["best"],
        )
        for row in rows
    ]
