"""Helpers shared by the discover and archive command groups: user-error handling (one line,
non-zero exit, no traceback), number formatting, and rich renderings of archive queries."""

from __future__ import annotations

import functools
import math
import re
import sys

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

# Off a terminal (logs, pipes, CI) rich would assume 80 columns and squeeze the tables.
console = Console() if sys.stdout.isatty() else Console(width=140)
err_console = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=140)

ARCHIVE_HELP = "The archive file (SQLite). Default ./metarl.db, or $METARL_ARCHIVE."


def user_error(message: str, code: int = 1) -> typer.Exit:
    from rich.markup import escape

    err_console.print(
        f"[bold red]error:[/] {escape(str(message))}", highlight=False, soft_wrap=True
    )
    return typer.Exit(code)


def _user_error_types() -> tuple[type[BaseException], ...]:
    # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
    from metarl.archives.store import ArchiveError
    from metarl.discovery.config import ConfigError
    from metarl.discovery.loop import LoopError
    from metarl.evaluation.sandbox import SandboxUnavailable
    from metarl.rl.suites import UnknownSuite
    from metarl.tasks import UnknownTask

    return (ArchiveError, ConfigError, LoopError, SandboxUnavailable, UnknownSuite, UnknownTask)


def handles_user_errors(fn):
    """Turn the errors a user can cause into one clear line and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except _user_error_types() as error:
            raise user_error(str(error)) from None
        except BrokenPipeError:
            sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—"
        return f"{value:.{digits}f}"
    return str(value)


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def parse_duration(text: str | None) -> float | None:
    """'600', '600s', '10m', '1.5h' -> seconds; 'none'/'0' -> None."""
    if text is None:
        return None
    value = str(text).strip().lower()
    if value in ("", "none", "0", "inf", "unlimited"):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh]?)", value)
    if not match:
        raise typer.BadParameter(f"{text!r} is not a duration (e.g. 600, 90s, 10m, 1.5h)")
    scale = {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    return float(match.group(1)) * scale


def fate_text(row: dict) -> Text:
    status = row.get("status")
    if status == "passed":
        return Text("passed", style="green")
    if status == "duplicate":
        return Text(f"duplicate of {row.get('duplicate_of') or '?'}", style="yellow")
    if status == "no_code":
        return Text(f"no program: {row.get('reason') or ''}"[:70], style="red")
    reason = (row.get("reason") or "").replace("\n", " ")
    return Text(f"{row.get('stage')}: {reason}"[:90], style="red")


def leaderboard_table(board, *, show_run: bool = False) -> Table:
    table = Table(title=f"leaderboard — {board.title}", title_justify="left", header_style="bold")
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
        table.add_column(env, justify="right", no_wrap=True)
    table.add_column("fitness", justify="right")
    table.add_column("confirmed", justify="right")
    table.add_column("held-out", justify="right")
    table.add_column("gen", justify="right")
    table.add_column("proposer", overflow="ellipsis")
    for row in board.rows:
        cells = [str(row.rank), row.id]
        if show_run or board.mixed:
            cells.append(row.run_id)
        if board.mixed:
            cells.append(f"{row.task}/{row.suite}")
        cells.append(Text(row.name or "—", style="cyan" if row.is_seed else "bold"))
        cells += [fmt(row.env_scores.get(env)) for env in board.envs]
        cells += [
            fmt(row.fitness),
            fmt(row.confirmed),
            fmt(row.heldout),
            str(row.generation),
            row.proposer or "—",
        ]
        table.add_row(*[c if isinstance(c, Text) else Text(c) for c in cells])
    return table
