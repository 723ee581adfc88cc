"""The report's "other harnesses" section: a run's candidates scored in another project's
harness (DiscoGen's: `metarl evaluate r3-12 --harness discogen`, archives/external.py) beside
our own scores of them.

Why beside and not merged: the two numbers are different quantities. Ours is the run's
protocol (its suite, seeds drawn per evaluation, normalised between random and PPO); DiscoGen's
is candidate / its base module at the best of 10 learning rates over its 8 fixed seeds. What
carries across is the *order*: benchmarks/discogen.py found the same order of three drifts in
both harnesses on Breakout-MinAtar (Spearman 1.00 at 5e4 and 2e5 steps). So the section lists
each evaluation with its protocol, and where three or more candidates were scored under one
external protocol it gives the rank correlation between our training score and theirs, with
its n; below three there is no correlation to report.

Kept apart from story.py (whose file is long), as guidance.py is; the page attaches it only to
runs with external evaluations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from scipy.stats import spearmanr

from metarl.archives.external import ExternalEvaluation, run_external
from metarl.archives.queries import test_column
from metarl.archives.store import Archive
from metarl.evaluation.text import printable


@dataclass(frozen=True)
class HarnessRow:
    """One external evaluation of one of the run's candidates.

    Attributes:
        candidate: its id; name: its name (printable).
        ours: our training score (selection's fitness); ours_ci: its interval or None.
        ours_test: our reported test score (final, else confirmed, else selection's) or None.
        harness: "discogen 1.3.0"; side: the harness's split; config: its config overrides.
        theirs: the harness's score (candidate / its base, mean over games) or None.
        games: "Breakout 1.02, Freeway 0.98", or why it failed (printable).
        group: the external protocol's key; rows with one key are comparable.
    """

    candidate: str
    name: str
    ours: float | None
    ours_ci: list[float] | None
    ours_test: float | None
    harness: str
    side: str
    config: str
    theirs: float | None
    games: str
    group: str


@dataclass(frozen=True)
class RankAgreement:
    """How one external protocol's scores order the run's candidates against ours.

    Attributes:
        harness, side, config: the protocol (as in HarnessRow).
        n: candidates scored by both.
        spearman: the rank correlation of our training score and theirs (None when n < 3).
    """

    harness: str
    side: str
    config: str
    n: int
    spearman: float | None


@dataclass(frozen=True)
class HarnessSection:
    rows: list[HarnessRow]
    agreement: list[RankAgreement]


def harnesses_of(archive: Archive, run_id: str) -> HarnessSection | None:
    """Run `run_id`'s candidates' external evaluations beside our scores; None without any.

    Args:
        archive: the archive.
        run_id: the run.

    Returns:
        The section's rows (proposal order) and the rank agreement per external protocol.
    """
    pairs = run_external(archive, run_id)
    if not pairs:
        return None
    rows = [_row(candidate, evaluation) for candidate, evaluation in pairs]
    return HarnessSection(rows, _agreement(rows))


def _row(candidate: dict, evaluation: ExternalEvaluation) -> HarnessRow:
    column, _ = test_column(candidate)
    low, high = candidate.get("fitness_low"), candidate.get("fitness_high")
    if evaluation.passed:
        games = ", ".join(
            f"{game.env.rpartition('/')[2]} "
            f"{'—' if game.normalised is None else format(game.normalised, '.3f')}"
            for game in evaluation.games
        )
    else:
        games = f"failed at {evaluation.stage}: {evaluation.reason}"
    config = evaluation.protocol.get("config") or {}
    return HarnessRow(
        candidate=candidate["id"],
        name=printable(candidate.get("name") or ""),
        ours=candidate.get("fitness") if candidate.get("status") == "passed" else None,
        ours_ci=[low, high] if low is not None and high is not None else None,
        ours_test=candidate[column] if column else None,
        harness=f"{evaluation.harness} {evaluation.release}".strip(),
        side=evaluation.side,
        config=", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "its own",
        theirs=evaluation.fitness,
        games=printable(games),
        group=json.dumps(
            [evaluation.harness, evaluation.release, evaluation.protocol], sort_keys=True
        ),
    )


def _agreement(rows: list[HarnessRow]) -> list[RankAgreement]:
    """Per external protocol: Spearman's rho of ours against theirs over the candidates both
    scored (a candidate evaluated twice under one protocol counts once, at its latest)."""
    out = []
    for group in dict.fromkeys(row.group for row in rows):
        latest = {
            row.candidate: row
            for row in rows
            if row.group == group and row.ours is not None and row.theirs is not None
        }
        first = next(row for row in rows if row.group == group)
        pairs = list(latest.values())
        rho = None
        if len(pairs) >= 3:
            value = spearmanr([p.ours for p in pairs], [p.theirs for p in pairs]).statistic
            rho = None if value != value else float(value)  # NaN: a constant column
        out.append(RankAgreement(first.harness, first.side, first.config, len(pairs), rho))
    return out
