"""The archive's tables: the leaderboard (`metarl leaderboard`, and after every run), the runs
(`metarl runs`), and a candidate's fate as one cell. Every archived string (names, reasons,
proposers) is a `console.untrusted` cell: the archive holds model and candidate text."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text

from metarl.cli.console import Grid, cells, untrusted
from metarl.cli.formats import fmt, fmt_interval, fmt_seconds
from metarl.logs import run_log_path

RUN_STATUS_STYLES = {
    "finished": "green",
    "running": "cyan",
    "stopped": "yellow",
    "interrupted": "yellow",
    "killed": "red",
    "stale": "yellow",
    "failed": "red",
}


def fate_text(row: dict) -> Text:
    """A candidate's fate: passed, duplicate of X, or the stage it stopped at and why.

    Args:
        row: a candidate's archived row, or a loop event with its `status`, `stage`, `reason`.

    Returns:
        The fate, styled, its reason made safe to print.
    """
    status = row.get("status")
    if status == "passed":
        return Text("passed", style="green")
    if status == "duplicate":
        return untrusted(f"duplicate of {row.get('duplicate_of') or '?'}", "yellow")
    if status == "no_code":
        return untrusted(f"no program: {row.get('reason') or ''}"[:70], "red")
    reason = (row.get("reason") or "").replace("\n", " ")
    return untrusted(f"{row.get('stage')}: {reason}"[:90], "red")


def comparable_text(differs: list[str]) -> Text:
    """ "yes", or "≠ seeds, budget" in red: what differs from the board's reference setting."""
    if not differs:
        return Text("yes", style="green")
    return untrusted("≠ " + ", ".join(differs), "red")


# how a leaderboard row marks its run's incumbent (`LeaderRow.incumbent`)
INCUMBENT_MARK = " ★"


def incumbent_text(incumbent) -> str:
    """A run's incumbent as every command names it: id, name, score, validation score and
    why it is the incumbent; "none yet (nothing scored)" without one.

    Args:
        incumbent: a `metarl.archives.incumbents.RunIncumbent`, or None.
    """
    if incumbent is None:
        return "none yet (nothing scored)"
    name = f" {incumbent.name}" if incumbent.name else ""
    validation = ""
    if incumbent.validation is not None:
        interval = fmt_interval(incumbent.validation, incumbent.validation_ci, 2)
        validation = f" · validation {interval}"
    score = f"{incumbent.score_kind} {fmt(incumbent.score)}"
    return f"{incumbent.id}{name} · {score}{validation} · {incumbent.why()}"


def leaderboard_table(board, *, show_run: bool = False) -> Table:
    """A `metarl.archives.queries.leaderboard` as a table, one column per environment.

    Args:
        board: the leaderboard (its rows, environments, title, reference setting).
        show_run: add the run and method columns (a board of every run).

    Returns:
        The table.
    """
    table = Table(
        title=untrusted(f"leaderboard — {board.title}"),
        title_justify="left",
        header_style="bold",
    )
    ids = [row.id for row in board.rows] or [""]
    names = [row.name or "—" for row in board.rows] or [""]
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("candidate", no_wrap=True, min_width=min(12, max(map(len, ids))))
    if show_run or board.mixed:
        table.add_column("run")
    if board.mixed:
        table.add_column("task/suite")
    table.add_column("name", no_wrap=True, min_width=min(20, max(map(len, names))))
    for env in board.envs:
        table.add_column(untrusted(env), justify="right", no_wrap=True)
    table.add_column("train", justify="right", no_wrap=True)
    show_confirmed = any(row.confirmed is not None for row in board.rows)  # older archives
    if show_confirmed:
        table.add_column("confirmed", justify="right", no_wrap=True)
    table.add_column("validation", justify="right", no_wrap=True)
    table.add_column("test", justify="right", no_wrap=True)
    # the method column where methods can differ: --all, or a board that mixes them
    show_method = show_run or len({row.method for row in board.rows}) > 1
    if show_method:
        table.add_column("method")
    table.add_column("gen", justify="right")
    table.add_column("proposer", overflow="ellipsis")
    if board.reference is not None:
        table.add_column("comparable", no_wrap=True)
    for row in board.rows:
        values: list = [str(row.rank), row.id + (INCUMBENT_MARK if row.incumbent else "")]
        if show_run or board.mixed:
            values.append(row.run_id)
        if board.mixed:
            values.append(f"{row.task}/{row.suite}")
        values.append(untrusted(row.name or "—", "cyan" if row.is_seed else "bold"))
        values += [fmt(row.env_scores.get(env)) for env in board.envs]
        values += [
            fmt_interval(row.fitness, row.fitness_ci, 2),
            *([fmt_interval(row.confirmed, row.confirmed_ci, 2)] if show_confirmed else []),
            fmt_interval(row.validation, row.validation_ci, 2),
            fmt_interval(row.heldout, row.heldout_ci, 2) + TEST_MARK.get(row.heldout_source, ""),
            *([row.method] if show_method else []),
            str(row.generation),
            row.proposer or "—",
        ]
        if board.reference is not None:
            values.append(comparable_text(row.differs))
        table.add_row(*cells(*values))
    captions = [protocol_caption(board.rows)]
    if any(row.incumbent for row in board.rows):
        captions.append(
            f"ranked by train score (confirmed when re-evaluated);{INCUMBENT_MARK} marks the "
            "run's incumbent, which selection kept: where validation races decide it, it need "
            "not rank first"
        )
    if board.reference is not None:
        captions.append(
            f"compared against {board.reference.describe()}; rows marked ≠ were scored in "
            "another setting and do not compare with it"
        )
    table.caption = untrusted("\n".join(captions))
    table.caption_justify = "left"
    return table


# how the test column marks a number measured with the candidate rather than re-measured
TEST_MARK = {"selection": " *", "confirmed": " ᶜ"}


def protocol_caption(rows) -> str:
    """What the columns mean, with the protocol(s) the rows were scored under."""
    protocols = sorted({row.protocol or "unrecorded" for row in rows}) or ["—"]
    return (
        f"protocol {', '.join(protocols)}: normalised scores (0 = random policy, 1 = the "
        "baseline on the same seeds) with 95% intervals; train ranks proposals, validation "
        "(fresh seeds) decides the incumbent, test is never selected on (re-measured on fresh "
        "seeds after selection; * measured with the candidate)"
    )


def runs_table(runs: list[dict], archive_path: str) -> Table:
    """The archive's runs: status, task, suite, progress, incumbent, time, cost; the
    caption says where each run's log is.

    Args:
        runs: `Archive.runs()` rows (with their `shown_status`, and where the caller read
            them, `incumbent` and `incumbent_score`: `metarl.archives.incumbents.run_incumbent`).
        archive_path: the archive, for the title and the logs' folder.

    Returns:
        The table.
    """
    table = Table(
        title=untrusted(f"runs in {archive_path}"), title_justify="left", header_style="bold"
    )
    right = ("children", "gen", "score", "time", "cost")
    for column in (
        "run",
        "status",
        "task",
        "suite",
        "method",
        "proposer",
        "children",
        "gen",
        "incumbent",
        "score",
        "time",
        "cost",
        "started",
    ):
        table.add_column(column, justify="right" if column in right else "left")
    for run in runs:
        status = untrusted(run["shown_status"], RUN_STATUS_STYLES.get(run["shown_status"], ""))
        if run.get("stop_reason") and run["shown_status"] != "finished":
            status.append_text(untrusted(f" ({run['stop_reason']})", "dim"))
        table.add_row(
            *cells(
                run["id"],
                status,
                run["task"],
                run["suite"],
                run.get("method") or "discovery",
                run["proposer"] or "—",
                f"{run['candidates_count'] or 0}"
                + (f"/{run['budget_candidates']}" if run.get("budget_candidates") else ""),
                str(run["generation"] or 0),
                run.get("incumbent") or run["best_id"] or "—",
                fmt(run.get("incumbent_score", run["best_fitness"])),
                fmt_seconds(run["elapsed_s"]),
                f"${run['cost_usd']:.3f}" if run.get("cost_usd") else "—",
                (run["started_at"] or "")[:19],
            )
        )
    table.caption = untrusted(f"each run's log: {run_log_path(archive_path, 'RUN')}")
    table.caption_justify = "left"
    return table


def run_details(run: dict, log: Path, counts=None, incumbent=None) -> Grid:
    """`metarl show RUN`: a run's status, method, progress, incumbent and log.

    Args:
        run: an `Archive.runs()` row (with its `shown_status`).
        log: where the run's log is.
        counts: its children, seed programs and scored candidates
            (`metarl.archives.incumbents.run_counts`); None: the row's children count.
        incumbent: its incumbent (`metarl.archives.incumbents.run_incumbent`); None: none yet.

    Returns:
        The grid.
    """
    grid = Grid()
    status = untrusted(run["shown_status"], RUN_STATUS_STYLES.get(run["shown_status"], ""))
    if run.get("stop_reason"):
        status.append_text(untrusted(f" ({run['stop_reason']})", "dim"))
    grid.add_row("run", run["id"])
    grid.add_row("status", status)
    grid.add_row("method", f"{run.get('method') or 'discovery'} · {run.get('proposer') or '—'}")
    grid.add_row("task", f"{run['task']} · suite {run['suite']}")
    scored = counts.describe() if counts else f"{run['candidates_count'] or 0} children"
    grid.add_row("candidates", f"{scored} · generations done {run['generation'] or 0}")
    grid.add_row("incumbent", incumbent_text(incumbent))
    grid.add_row(
        "time", f"{fmt_seconds(run['elapsed_s'])} · started {(run['started_at'] or '')[:19]}"
    )
    grid.add_row(
        "heartbeat",
        f"{(run.get('updated_at') or '—')[:19]} · pid {run.get('pid') or '—'} "
        f"on {run.get('host') or '—'}",
    )
    grid.add_row("log", f"{log}" + ("" if log.exists() else " (not written yet)"))
    return grid
