"""The generalisation gap of a run: every scored candidate's train score against its test score,
as plain data (the scatter is drawn by `figures.generalisation_gap`), so a test checks what is
drawn.

A candidate's train score is its `fitness` (the train-role aggregate on its selection seeds).
Its test score is the number the leaderboard reports (`queries.test_column`): the test role
re-measured on fresh seeds after it became the incumbent (`final`), else an older archive's
confirmation on more seeds (`confirmed`), else the score measured with the candidate itself
(`selection`: seed programs, and every candidate of an archive from before the validation
role). Children scored only on the train role have no test score; they are counted, not drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metarl.archives.queries import test_column

# the baseline program's normalised score on every role (1.0 = PPO on the same seeds)
BASELINE = 1.0
# what each test source means, as the page's tables and hovers say it
TEST_SOURCES = {
    "final": "re-measured on fresh seeds after selection",
    "confirmed": "confirmed on more seeds",
    "selection": "measured with the candidate",
}
UNRECORDED = "unrecorded"  # the protocol of a run archived before runs recorded one
TABLE_LIMIT = 40  # rows of the section's table (the caption counts the rest)


@dataclass
class GapPoint:
    """One candidate on the train-vs-test scatter."""

    id: str
    run_id: str
    seq: int
    name: str
    train: float  # fitness: the train-role aggregate
    train_ci: list[float] | None
    test: float
    test_ci: list[float] | None
    test_source: str  # final | confirmed | selection (TEST_SOURCES)
    test_seeds: int  # the fresh seeds of a final test score; 0 otherwise
    validation: float | None  # IQM over its validation rounds (raced candidates only)
    validation_ci: list[float] | None
    is_seed: bool
    is_incumbent: bool = False  # the run's incumbent (its best): highlighted

    @property
    def worse(self) -> bool:
        """Whether its whole test interval lies below the baseline (significantly worse than
        PPO on the test envs); False without an interval."""
        return self.test_ci is not None and self.test_ci[1] < BASELINE

    @property
    def gap(self) -> float:
        """Test minus train score: negative when it generalises worse than it trained."""
        return self.test - self.train


@dataclass
class Generalisation:
    """A run's scored candidates with a test score, and how many had none."""

    run_id: str
    protocol: str  # the run's evaluation protocol, UNRECORDED for older runs
    incumbent: str | None  # the highlighted candidate's id
    points: list[GapPoint] = field(default_factory=list)
    untested: int = 0  # scored candidates without a test score: left out of the scatter

    @property
    def scored(self) -> int:
        """Scored candidates (passed, with a train score), drawn or not."""
        return len(self.points) + self.untested

    @property
    def worse(self) -> list[GapPoint]:
        """The points whose test interval lies entirely below the baseline, in proposal
        order."""
        return [p for p in self.points if p.worse]

    def listed(self, limit: int = TABLE_LIMIT) -> list[GapPoint]:
        """The points the section's table lists: the incumbent, the seed programs, every test
        score measured apart from selection (final, confirmed) and every one significantly
        worse than the baseline, in proposal order, at most `limit`.

        Args:
            limit: the most rows.

        Returns:
            The points, incumbent first.
        """
        chosen = [
            p
            for p in self.points
            if p.is_incumbent or p.is_seed or p.test_source != "selection" or p.worse
        ]
        chosen.sort(key=lambda p: (not p.is_incumbent, p.seq))
        return chosen[:limit]


def _interval(row: dict, column: str) -> list[float] | None:
    low, high = row.get(f"{column}_low"), row.get(f"{column}_high")
    return [low, high] if low is not None and high is not None else None


def protocol_label(protocol: str | None) -> str:
    """A run's protocol as the report shows it: its name, or UNRECORDED for a run archived
    before runs recorded one.

    Args:
        protocol: `queries.run_protocols`' label of the run ("" or None when unrecorded).

    Returns:
        The label.
    """
    return protocol or UNRECORDED


def generalisation_of(
    rows: list[dict], run_id: str, incumbent: str | None, protocol: str | None
) -> Generalisation:
    """The train-vs-test data of one run.

    Args:
        rows: the run's `report_rows.run_points` rows.
        run_id: the run.
        incumbent: the run's incumbent (`runs.best_id`; else its best score so far), drawn
            highlighted; None when it has none.
        protocol: the run's protocol label (None or "" when unrecorded).

    Returns:
        The Generalisation: one GapPoint per passed candidate with a train and a test score,
        in proposal order; the passed ones without a test score counted in `untested`.
    """
    out = Generalisation(run_id=run_id, protocol=protocol_label(protocol), incumbent=incumbent)
    for row in rows:
        if row["status"] != "passed" or row["fitness"] is None:
            continue
        column, source = test_column(row)
        if column is None:
            out.untested += 1
            continue
        out.points.append(
            GapPoint(
                id=row["id"],
                run_id=row.get("run_id") or run_id,
                seq=row["seq"],
                name=row["name"] or "",
                train=row["fitness"],
                train_ci=_interval(row, "fitness"),
                test=row[column],
                test_ci=_interval(row, column),
                test_source=source,
                test_seeds=len(row.get("final_seeds") or []) if source == "final" else 0,
                validation=row.get("validation"),
                validation_ci=_interval(row, "validation"),
                is_seed=bool(row["is_seed"]),
                is_incumbent=row["id"] == incumbent,
            )
        )
    return out
