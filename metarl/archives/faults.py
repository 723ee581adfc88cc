"""The archive's errors: `ArchiveError`, and what a failing SQLite call on the archive becomes.

A user can fix what goes wrong with an archive file (a full disk, a damaged file, another
process holding the write lock), so it has to reach them as one line with a hint, never as a
`sqlite3.OperationalError` traceback. `Archive` (store.py) runs every SQL statement through
`Archive.__init__`, `Archive.transaction()` or `Archive.query()`, and those three turn a
`sqlite3.Error` into one of the `ArchiveFault` classes here (`archive_fault`): the translation
happens once, where the SQL runs, so no caller above the archive layer (and not the CLI, whose
error mapper knows only `MetarlError`) ever sees sqlite3.

Each fault keeps its sqlite3 base class (`ArchiveFull` is a `sqlite3.OperationalError`,
`ArchiveConflict` a `sqlite3.IntegrityError`), as `metarl.errors` asks of a subclass whose
callers catch the builtin: code written against sqlite3 catches it still.

`ArchiveError` is defined here, below store.py, so that store.py can import its faults; it is
re-exported by store.py, where callers import it from. This module imports only the standard
library and `metarl.errors`.
"""

from __future__ import annotations

import sqlite3
from os import PathLike

from metarl.errors import MetarlError

__all__ = [
    "ArchiveBusy",
    "ArchiveConflict",
    "ArchiveDamaged",
    "ArchiveError",
    "ArchiveFault",
    "ArchiveFull",
    "archive_fault",
    "damaged_hint",
    "first_problem",
]

FULL_MESSAGE = "database or disk is full"  # SQLITE_FULL's message (also PRAGMA max_page_count's)
# the first line `PRAGMA quick_check` prints when it reports problems: not itself a problem
_CHECK_HEADER = "*** in database main ***"


class ArchiveError(MetarlError):
    """A problem the user can fix (missing file, unknown run or candidate); one clear line."""


class ArchiveFault(ArchiveError, sqlite3.Error):
    """A SQLite call on the archive failed; one line, with what to do about it.

    Attributes:
        reason: SQLite's own message ("database or disk is full"), without the file's name.
        remedy: what to do before trying again (`hint` says it, with the command to rerun).
    """

    remedy = "check the archive file and the disk it is on"
    hint = f"{remedy}, then run the command again"

    def __init__(self, message: str = "", *, reason: str = "", hint: str | None = None):
        """Args:
        message: what went wrong, one line, naming the archive.
        reason: SQLite's message (default: `message`).
        hint: what to do about it; None keeps the class's hint.
        """
        super().__init__(message, hint=hint)
        self.reason = reason or message


class ArchiveFull(ArchiveFault, sqlite3.OperationalError):
    """A write found the disk (or the archive's page limit) full: SQLITE_FULL. Every committed
    write is intact; the failed transaction was rolled back, so a resume continues the run."""

    remedy = "free disk space"
    hint = f"{remedy}, then `metarl resume RUN`"


class ArchiveDamaged(ArchiveFault, sqlite3.DatabaseError):
    """The file is not a readable SQLite database any more (SQLITE_CORRUPT, SQLITE_NOTADB, or
    a problem `PRAGMA quick_check` found when it was opened)."""

    remedy = "restore a copy of the archive"
    hint = (
        f"{remedy}, or salvage what SQLite can still read: "
        "`sqlite3 DAMAGED.db .recover | sqlite3 RECOVERED.db`"
    )


class ArchiveBusy(ArchiveFault, sqlite3.OperationalError):
    """Another process held the archive's write lock past the 60 s busy timeout
    (SQLITE_BUSY, SQLITE_LOCKED)."""

    remedy = "stop the other process writing the archive (`metarl runs` shows running runs)"
    hint = f"{remedy}, then run the command again"


class ArchiveConflict(ArchiveFault, sqlite3.IntegrityError):
    """A write broke one of the archive's constraints (a duplicate id): two writers raced for
    the same row, or a bug; nothing of the transaction was written."""

    remedy = "make sure only one process writes each run (`metarl runs` shows running runs)"
    hint = f"{remedy}, then run the command again"


def damaged_hint(path: str | PathLike | None) -> str:
    """ArchiveDamaged's hint, with archive `path` in its recovery command when it is known."""
    if path is None:
        return ArchiveDamaged.hint
    return ArchiveDamaged.hint.replace("DAMAGED.db", str(path))


_FULL_CODES = {sqlite3.SQLITE_FULL}
_DAMAGED_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


def _primary_code(error: sqlite3.Error) -> int | None:
    """SQLite's primary result code of `error` (SQLITE_FULL for SQLITE_FULL_*), or None when
    it carries none (an error raised by the sqlite3 module itself, or by a test)."""
    code = getattr(error, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def archive_fault(error: sqlite3.Error, path: str | PathLike | None = None) -> ArchiveError:
    """The `ArchiveFault` a failing SQLite call on archive `path` is reported as.

    The kind is read from SQLite's result code, else from its message (an error built by hand,
    as a test's, has no code).

    Args:
        error: what sqlite3 raised.
        path: the archive file (None: "the archive").

    Returns:
        `error` itself when it already is an ArchiveError; else an ArchiveFull, ArchiveDamaged,
        ArchiveBusy, ArchiveConflict or ArchiveFault, whose `reason` is SQLite's message.
    """
    if isinstance(error, ArchiveError):
        return error
    where = str(path) if path is not None else "the archive"
    reason = " ".join(str(error).split()) or type(error).__name__
    code = _primary_code(error)
    lowered = reason.lower()
    if code in _FULL_CODES or FULL_MESSAGE in lowered:
        return ArchiveFull(f"cannot write {where}: {reason}", reason=reason)
    if code == sqlite3.SQLITE_NOTADB or "not a database" in lowered:
        return ArchiveDamaged(
            f"{where} is not a usable SQLite archive ({reason})",
            reason=reason,
            hint="give the archive `metarl discover` wrote; if this file was one, "
            + damaged_hint(path),
        )
    if code in _DAMAGED_CODES or "malformed" in lowered:
        hint = damaged_hint(path)
        return ArchiveDamaged(f"{where} is damaged ({reason})", reason=reason, hint=hint)
    if code in _BUSY_CODES or "locked" in lowered:
        return ArchiveBusy(f"{where} is locked by another process ({reason})", reason=reason)
    if isinstance(error, sqlite3.IntegrityError):
        return ArchiveConflict(f"a write to {where} was refused ({reason})", reason=reason)
    return ArchiveFault(f"{where}: {reason}", reason=reason)


def first_problem(conn: sqlite3.Connection) -> str | None:
    """The first problem `PRAGMA quick_check` finds in the database of `conn`, or None.

    quick_check verifies every b-tree page (headers, cell pointers, key order, the free list,
    page ownership, NOT NULL) without matching indexes to their tables, so its cost grows with
    the file's size. Measured on benchmarks/report.py's synthetic archive (10,202 candidates,
    43,161 evaluations, 10,000 LLM calls: 414 MB), 2-core CPU machine under load, SQLite 3.40:
    0.35-0.55 s per check (median of 7: 0.55 s), against 8-9 s for `metarl runs` on it in all;
    `PRAGMA integrity_check` took 0.5-0.95 s. A small archive's check costs nothing measurable.

    It sees structure only: bytes changed inside a stored value (a program's code, an outcome's
    JSON) leave every page well formed, and no check short of reading and parsing every value
    can find them (tests/test_archive_faults.py). Random bytes over a whole page are found:
    its b-tree header no longer parses.

    Args:
        conn: an open connection to the archive.

    Returns:
        SQLite's first complaint (e.g. "Page 55: btreeInitPage() returns error code 11"), or
        None when the check says "ok".

    Raises:
        sqlite3.Error: the file cannot even be checked (not a database, page 1 unreadable).
    """
    row = conn.execute("PRAGMA quick_check(1)").fetchone()
    verdict = str(row[0]) if row else "ok"
    if verdict == "ok":
        return None
    lines = [line.strip() for line in verdict.splitlines() if line.strip()]
    problems = [line for line in lines if line != _CHECK_HEADER]
    return (problems or lines or [verdict])[0]
