"""A run's incumbent and its counts: one decision and one wording, read by every view.

`metarl show RUN`, the leaderboard, the run summary after `metarl discover` and the HTML
report all name a run's incumbent through `run_incumbent` (the rule: `run_incumbents`) and
count its candidates through `run_counts`, so that no two of them can disagree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from metarl.archives.store import Archive, ArchiveError


def interval(row: dict, score: str) -> list[float] | None:
    """[low, high] from a row's `{score}_low`/`{score}_high` columns; None when not recorded."""
    low, high = row.get(f"{score}_low"), row.get(f"{score}_high")
    return [low, high] if low is not None and high is not None else None


# how a run's incumbent was decided (`RunIncumbent.decided_by`)
RACED = "validation"  # training scores nominate, validation races on fresh seeds decide
BEST_TRAIN = "train"  # the best train score wins (no races: `--no-confirm`, ES, GRPO, ...)
UNRECORDED_BEST = "unrecorded"  # the run recorded none: its best train score, read here


@dataclass(frozen=True)
class RunIncumbent:
    """A run's incumbent, as `metarl show RUN`, the leaderboard, the run summary and the report
    all name it (`run_incumbent`)."""

    id: str
    run_id: str
    name: str
    seq: int
    is_seed: bool
    score: float | None  # what selection compares: its confirmed score, else its train score
    score_kind: str  # which one `score` is: "confirmed" or "train" (the leaderboard's columns)
    validation: float | None  # its validation score (raced candidates only)
    validation_ci: list[float] | None
    decided_by: str  # RACED | BEST_TRAIN | UNRECORDED_BEST
    # the run's passed candidates scored above it (train, or confirmed): challengers its
    # races have not crowned
    outscored: int = 0

    @property
    def validated(self) -> bool:
        """Whether it went through validation races (it has a validation score)."""
        return self.decided_by == RACED and self.validation is not None

    def why(self) -> str:
        """Why it is the incumbent, in a researcher's words."""
        if self.decided_by == RACED:
            if self.validated:
                return (
                    "validated: it won or held its validation races on fresh seeds (train "
                    "scores only nominate challengers)"
                )
            if self.outscored:
                return (
                    f"{_plural(self.outscored, 'candidate', 'candidates')} scored above it on "
                    "train, but no validation race has crowned one (each lost, or has not "
                    "finished)"
                )
            return "best train score; no child scored above it, so none raced it on validation"
        if self.decided_by == UNRECORDED_BEST:
            return "best train score (the run recorded no incumbent)"
        return "best train score (this run does not race on validation)"


def _decided_by(run: dict) -> str:
    config = run.get("config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            config = {}
    config = config if isinstance(config, dict) else {}
    method = run.get("method") or "discovery"
    return RACED if method == "discovery" and config.get("confirm") else BEST_TRAIN


def run_incumbents(archive: Archive, run_ids) -> dict[str, str]:
    """THE rule for a run's incumbent: run id -> its incumbent's candidate id.

    The incumbent is what the run's selection recorded (`runs.best_id`: a discovery run's
    incumbent after its validation races, an ES or GRPO run's best export); a run that recorded
    none (an older or interrupted one) gets its best passed candidate by the score selection
    compares (confirmed, else train), the earliest on a tie. Runs with no passed candidate are
    left out. Every view (`metarl show`, the leaderboard, the run summary, the report) asks this.
    """
    ids = sorted({r for r in run_ids if r})
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    recorded = archive.query(f"SELECT id, best_id FROM runs WHERE id IN ({marks})", ids)
    out = {r["id"]: r["best_id"] for r in recorded if r["best_id"]}
    missing = [r["id"] for r in recorded if not r["best_id"]]
    if missing:
        marks = ",".join("?" * len(missing))
        for row in archive.query(
            "SELECT run_id, id FROM candidates WHERE run_id IN ("
            + marks
            + ") AND status = 'passed' AND fitness IS NOT NULL "
            "ORDER BY run_id, coalesce(confirmed_fitness, fitness) DESC, seq",
            missing,
        ):
            out.setdefault(row["run_id"], row["id"])
    return out


def run_incumbent(archive: Archive, run_id: str) -> RunIncumbent | None:
    """Run `run_id`'s incumbent (`run_incumbents`) with its scores and why it is the one;
    None when the run has none (nothing passed).

    Raises:
        ArchiveError: no such run.
    """
    run = archive.get_run(run_id)
    cid = run_incumbents(archive, [run_id]).get(run_id)
    if cid is None:
        return None
    try:
        row = archive.candidate(cid)
    except ArchiveError:  # a recorded id whose row is gone: say what the run recorded
        row = {"id": cid}
    confirmed, fitness = row.get("confirmed_fitness"), row.get("fitness")
    score = confirmed if confirmed is not None else fitness
    above = archive.query(
        "SELECT count(*) AS n FROM candidates WHERE run_id = ? AND status = 'passed' AND id != ? "
        "AND coalesce(confirmed_fitness, fitness) > ?",
        (run_id, cid, score),
    )
    return RunIncumbent(
        id=cid,
        run_id=run_id,
        name=row.get("name") or "",
        seq=row.get("seq") or 0,
        is_seed=bool(row.get("is_seed")),
        score=score,
        score_kind="confirmed" if confirmed is not None else "train",
        validation=row.get("validation"),
        validation_ci=interval(row, "validation"),
        decided_by=_decided_by(run) if run.get("best_id") else UNRECORDED_BEST,
        outscored=above[0]["n"] if score is not None else 0,
    )


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


@dataclass(frozen=True)
class RunCounts:
    """What a run has archived, counted one way in every view (`run_counts`)."""

    children: int  # candidates it proposed: what its budget counts (`runs.candidates_count`)
    seeds: int  # the seed programs it scored first (its starting population)
    scored: int  # of both, those that passed every stage with a train score

    @property
    def total(self) -> int:
        return self.children + self.seeds

    def describe(self) -> str:
        """e.g. "3 children + 2 seed programs, 4 scored"."""
        return (
            f"{_plural(self.children, 'child', 'children')} + "
            f"{_plural(self.seeds, 'seed program', 'seed programs')}, {self.scored} scored"
        )


def run_counts(archive: Archive, run_id: str) -> RunCounts:
    """Run `run_id`'s children, seed programs and scored candidates, from its candidates."""
    children = seeds = scored = 0
    for row in archive.query(
        "SELECT is_seed, count(*) AS n, "
        "sum(CASE WHEN status = 'passed' AND fitness IS NOT NULL THEN 1 ELSE 0 END) AS scored "
        "FROM candidates WHERE run_id = ? GROUP BY is_seed",
        (run_id,),
    ):
        if row["is_seed"]:
            seeds += row["n"]
        else:
            children += row["n"]
        scored += row["scored"] or 0
    return RunCounts(children=children, seeds=seeds, scored=scored)


def run_summary(archive: Archive, run_id: str) -> dict:
    counts = archive.query(
        "SELECT status, count(*) AS n FROM candidates WHERE run_id = ? AND is_seed = 0 GROUP BY "
        "status",
        (run_id,),
    )
    stages = archive.query(
        "SELECT stage, count(*) AS n FROM candidates WHERE run_id = ? AND is_seed = 0 "
        "AND status != 'passed' GROUP BY stage",
        (run_id,),
    )
    return {
        "by_status": {r["status"]: r["n"] for r in counts},
        "stopped_at": {r["stage"]: r["n"] for r in stages},
        "counts": run_counts(archive, run_id),
        "incumbent": run_incumbent(archive, run_id),
    }


__all__ = [
    "RunCounts",
    "RunIncumbent",
    "interval",
    "run_counts",
    "run_incumbent",
    "run_incumbents",
    "run_summary",
]
