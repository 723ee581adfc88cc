"""Archive commands: leaderboard, show, lineage, runs, export. Read-only; safe to run while a
discovery writes to the same archive (WAL: readers never block the writer)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from metarl.cli.board import leaderboard_table, run_details, runs_table
from metarl.cli.candidate import lineage_tree, print_candidate
from metarl.cli.console import console, say
from metarl.cli.errors import UserError
from metarl.cli.options import (
    EXPORT_FORMATS,
    LEADERBOARD_ROWS,
    LINEAGE_DEPTH,
    archive_option,
)
from metarl.evaluation.text import printable
from metarl.logs import run_log_path
from metarl.tasks import known_task_names


def _open(path: str):
    """The archive at `path`; ArchiveError when there is none or it is not one."""
    # lazy: the archive's modules import sqlite_utils; `metarl --help` stays fast
    from metarl.archives.store import Archive

    return Archive(path, must_exist=True)


def _check_names(task: str | None, suite: str | None) -> None:
    """A usage error for a filter that names no task (UserError) or no suite (UnknownSuite)."""
    # lazy: suites read configs (jax); `metarl --help` stays fast
    from metarl.rl.suites import get_suite

    known = known_task_names()
    if task and task not in known:
        raise UserError(f"unknown task {task!r}; choose one of: {', '.join(known)}")
    if suite:
        get_suite(suite)


def leaderboard(
    run: Optional[str] = typer.Option(
        None, "--run", help="Rank this run's candidates (default: the latest run)."
    ),
    all_runs: bool = typer.Option(
        False,
        "--all-runs",
        "--all",
        help="Rank candidates of every run, marking rows scored in another setting (task, "
        "suite, seeds or budget) than most of the board.",
    ),
    task: Optional[str] = typer.Option(None, "--task", help="Only this task."),
    suite: Optional[str] = typer.Option(None, "--suite", help="Only this suite."),
    method: Optional[str] = typer.Option(
        None, "--method", help="Only this method: discovery, es, distil, symbolic."
    ),
    limit: int = typer.Option(LEADERBOARD_ROWS, "--limit", "-n", help="Rows to show."),
    archive: str = archive_option(),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Rank candidates by fitness (1.0 = as good as the baseline seed), whatever method made
    them: every candidate is scored by the same cascade on the same seeds.

    Columns: per-env normalised scores, the aggregate fitness, the fitness confirmed on
    more seeds (elites only), the held-out score, the method, generation, proposer.

    Examples:

      metarl leaderboard

      metarl leaderboard --run r2 --limit 10

      metarl leaderboard --all-runs --task drift --suite classic

      metarl leaderboard --all-runs --method es
    """
    # lazy: the archive's modules import sqlite_utils; `metarl --help` stays fast
    from metarl.archives.queries import leaderboard as rank

    if run and all_runs:
        raise UserError("give either --run RUN or --all-runs, not both")
    if limit < 1:
        raise UserError("--limit must be at least 1")
    _check_names(task, suite)
    with _open(archive) as store:
        methods = store.methods()
        if method is not None and method not in methods:
            there = ", ".join(methods) or "none yet"
            raise UserError(f"no run of method {method!r} in {archive}; methods there: {there}")
        board = rank(
            store,
            run_id=run,
            all_runs=all_runs,
            task=task,
            suite=suite,
            method=method,
            limit=limit,
        )
    if as_json:
        # ASCII JSON: a name's control and bidi characters stay \u escapes, inert on a terminal
        console.print_json(
            json.dumps([asdict(row) for row in board.rows], default=str), ensure_ascii=True
        )
        return
    if not board.rows:
        say(f"no passed candidates yet ({board.title})")
        return
    console.print(leaderboard_table(board, show_run=all_runs))


def show(
    candidate: str = typer.Argument(
        ..., help="Candidate id (e.g. r1-7), a prefix of its source hash, or a run id (r1)."
    ),
    archive: str = archive_option(),
    full: bool = typer.Option(False, "--full", help="Show whole LLM prompts and replies."),
) -> None:
    """A candidate: code, thought, scores, failure reason, parents, LLM calls; or a run: its
    status, progress and where its log is.

    Examples:

      metarl show r1-7

      metarl show r2-12 --full

      metarl show r2
    """
    from metarl.archives.external import external_evaluations  # lazy: as `_open`
    from metarl.archives.incumbents import run_counts, run_incumbent  # lazy: as `_open`
    from metarl.archives.runs import listed_runs  # lazy: sqlite_utils, as `_open`

    with _open(archive) as store:
        if re.fullmatch(r"r\d+", candidate):  # a run id (never a hash prefix: those are hex)
            run = next((r for r in listed_runs(store) if r["id"] == candidate), None)
            if run is None:
                store.get_run(candidate)  # ArchiveError naming the runs there are
            counts, incumbent = run_counts(store, candidate), run_incumbent(store, candidate)
            log = run_log_path(store.path, candidate)
            console.print(run_details(run, log, counts, incumbent))
            return
        cid = store.resolve_candidate(candidate)
        row = store.candidate(cid)
        evaluations = store.evaluations(cid)
        calls = store.calls(cid)
        children = store.children(cid)
        external = external_evaluations(store, [row["hash"]] if row.get("hash") else [], [cid])
        log = str(run_log_path(store.path, row["run_id"])) if row.get("run_id") else None
    print_candidate(cid, row, evaluations, calls, children, full=full, log=log, external=external)


def lineage(
    candidate: str = typer.Argument(
        ..., help="Candidate id (e.g. r1-7) or a prefix of its source hash."
    ),
    archive: str = archive_option(),
    depth: int = typer.Option(LINEAGE_DEPTH, "--depth", help="Generations of ancestors to show."),
) -> None:
    """The ancestry tree of a candidate, back to the seeds.

    Examples:

      metarl lineage r1-12

      metarl lineage r1-12 --depth 5
    """
    # lazy: the archive's modules import sqlite_utils; `metarl --help` stays fast
    from metarl.archives.queries import lineage as ancestry

    with _open(archive) as store:
        cid = store.resolve_candidate(candidate)
        root = ancestry(store, cid, max_depth=depth)
    console.print(lineage_tree(root))


def runs(archive: str = archive_option()) -> None:
    """List the archive's runs with status, progress and best fitness.

    Examples:

      metarl runs

      metarl runs --archive results/metarl.db
    """
    from metarl.archives.incumbents import run_incumbent  # lazy: as `_open`
    from metarl.archives.runs import listed_runs  # lazy: sqlite_utils, as `_open`

    with _open(archive) as store:
        found = listed_runs(store)
        for run in found:  # each run's incumbent, as `metarl show RUN` names it
            incumbent = run_incumbent(store, run["id"])
            run["incumbent"] = incumbent.id if incumbent else None
            run["incumbent_score"] = incumbent.score if incumbent else None
    if not found:
        say(f"no runs in {archive}")
        return
    console.print(runs_table(found, archive))


def export(
    run: str = typer.Argument(..., help="The run to export, e.g. r1."),
    fmt_name: str = typer.Option(
        EXPORT_FORMATS[0],
        "--format",
        "-f",
        help="json (everything) or csv (one row per candidate).",
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="File to write (default: stdout)."
    ),
    archive: str = archive_option(),
) -> None:
    """Export a run: JSON with the run, candidates, evaluations, calls and messages; or CSV.

    On stdout, control characters in archived text (a candidate's code, an LLM's reply) are
    written as visible escapes (\\x1b), never raw; --output writes the archive's text as is.

    Examples:

      metarl export r1 --format csv -o r1.csv

      metarl export r1 > r1.json
    """
    # lazy: the archive's modules import sqlite_utils; `metarl --help` stays fast
    from metarl.archives.queries import export_csv, export_json

    if fmt_name not in EXPORT_FORMATS:
        raise UserError(f"unknown format {fmt_name!r}; choose {' or '.join(EXPORT_FORMATS)}")
    if output is not None and not output.parent.exists():
        raise UserError(f"cannot write {output}: folder {output.parent} does not exist")
    with _open(archive) as store:
        text = export_json(store, run) if fmt_name == "json" else export_csv(store, run)
    if output is None:  # a terminal: candidate text with its escapes made visible
        typer.echo(printable(text), nl=False)
        return
    try:
        output.write_text(text)
    except OSError as error:
        raise UserError(f"cannot write {output}: {error.strerror or error}") from None
    say(f"wrote {output} ({len(text)} bytes)")
