"""Options and values shared by several commands: the archive, `--verbose`, durations.

The defaults that belong to a run or an evaluation live in `metarl.discovery.config` and
`metarl.evaluation.settings`; the ones here belong to the command line alone.
"""

from __future__ import annotations

import re
import signal
from contextlib import contextmanager
from typing import Any

import typer

from metarl.cli.errors import UserError
from metarl.evaluation import seeds
from metarl.evaluation.text import has_redactions, redact_config
from metarl.logs import mute_stderr
from metarl.tasks import task_names

DEFAULT_ARCHIVE = "metarl.db"
ARCHIVE_ENVVAR = "METARL_ARCHIVE"
LEADERBOARD_ROWS = 20  # `metarl leaderboard`
RUN_LEADERBOARD_ROWS = 15  # the leaderboard printed after a discovery run
LINEAGE_DEPTH = 30  # generations of ancestors `metarl lineage` shows
EXPORT_FORMATS = ("json", "csv")
UNLIMITED = ("", "none", "0", "inf", "unlimited")


def archive_option() -> Any:
    """The `--archive` option, the same for every command."""
    return typer.Option(
        DEFAULT_ARCHIVE,
        "--archive",
        envvar=ARCHIVE_ENVVAR,
        help=f"The archive file (SQLite). Default ./{DEFAULT_ARCHIVE}, or ${ARCHIVE_ENVVAR}.",
    )


def verbose_option() -> Any:
    """The `--verbose` option of the commands that evaluate candidates."""
    return typer.Option(
        False,
        "--verbose",
        "-v",
        help="Show the log's INFO records on stderr (without it: warnings and errors only).",
    )


def seed_values_option() -> Any:
    """The `--seed-values` option of every command that evaluates candidates."""
    return typer.Option(
        None,
        "--seed-values",
        help="Pin the training seeds, e.g. 0,1,2,3 (to reproduce a recorded score or a paper; "
        "recorded as pinned). Default: drawn per batch where no candidate can know them.",
    )


def task_list(names: list[str] | None = None) -> str:
    """Task names for an option's help, e.g. "drift, optimizer or value_loss" (default: the
    registry's program tasks; the names alone: listing them imports no task package, no jax)."""
    *rest, last = task_names() if names is None else names
    return f"{', '.join(rest)} or {last}" if rest else last


def parse_seed_values(text: str | None) -> list[int] | None:
    """`--seed-values` as a list of ints (None when not given).

    Raises:
        UserError: not comma-separated distinct integers in [0, 2^31).
    """
    if text is None:
        return None
    try:
        return seeds.parse_seed_values(text)
    except seeds.SeedError as error:
        raise UserError(f"--seed-values: {error}") from None


def archive_hint(archive_path: str) -> str:
    """The `--archive PATH` a follow-up command needs, or "" for the default archive."""
    return f" --archive {archive_path}" if archive_path != DEFAULT_ARCHIVE else ""


def parse_envs(text: str | None) -> list[str] | None:
    """`--envs A,B` as ["A", "B"] (None when the option was not given).

    Raises:
        UserError: the option was given but names no environment.
    """
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise UserError("--envs needs at least one environment, e.g. --envs CartPole-v1")
    return names


def parse_duration(text: str | None, option: str = "--max-time") -> float | None:
    """'600', '600s', '10m', '1.5h' -> seconds; 'none', '0', 'inf', 'unlimited' -> None.

    Raises:
        UserError: `text` is not a duration.
    """
    if text is None:
        return None
    value = str(text).strip().lower()
    if value in UNLIMITED:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh]?)", value)
    if not match:
        raise UserError(f"{option}: {text!r} is not a duration (e.g. 600, 90s, 10m, 1.5h)")
    scale = {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    return float(match.group(1)) * scale


@contextmanager
def interrupts_stop_cleanly():
    """Within: Ctrl-C and SIGTERM stop a run cleanly (KeyboardInterrupt: the archive stays
    consistent, the run resumable) and silence the stderr log at once, so that what the
    teardown logs goes to the run's log file only and the user reads one line. Outside the
    main thread the handlers are left as they are."""

    def handler(signum, _frame):
        mute_stderr()
        raise KeyboardInterrupt

    previous = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, handler)
    except ValueError:
        pass  # not the main thread: leave them
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def run_options(
    archive_path: str, resume: str | None, chosen: dict, budgets: dict, fields: set[str]
) -> dict:
    """A method run's options: the resumed run's stored ones (those in `fields`), then the
    options given. `chosen` define the run and must match a resumed run's; `budgets` may change
    (a None budget is left out, except max_time, where None lifts the limit).

    A stored option that held credentials (a URL's userinfo, archived as `***`) matches the
    real value given again, and must be given again.

    Raises:
        UserError: an option in `chosen` differs from the resumed run's, or a stored one lost
            its credentials and is not given.
    """
    # lazy: the archive imports jax through the evaluation layer; `metarl --help` stays fast
    from metarl.archives.store import Archive

    values: dict = {}
    if resume:
        with Archive(archive_path, must_exist=True) as store:
            stored = store.get_run(resume).get("config") or {}
        for key, value in chosen.items():
            if value is not None and stored.get(key) not in (value, redact_config(value)):
                raise UserError(
                    f"run {resume} was started with {key} {stored.get(key)!r}; it cannot "
                    "change on resume"
                )
        values = {k: v for k, v in stored.items() if k in fields}
    values.update({k: v for k, v in chosen.items() if v is not None})
    values.update({k: v for k, v in budgets.items() if v is not None or k == "max_time"})
    for key, value in values.items():
        if has_redactions(value):
            raise UserError(
                f"run {resume} was started with {key} {value!r}, whose credentials are never "
                "archived; give that option again to resume it"
            )
    return values
