"""The archive's connection: opening the file (checked, migrated), one transaction per
logical write, and the translation of every SQLite failure into the archive's one error family.

`Archive` (store.py) builds its reads and writes of runs, candidates and evaluations on this
class; nothing outside `metarl/archives/` opens the file.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlite_utils import Database

from metarl.archives.faults import (
    ArchiveDamaged,
    ArchiveError,
    archive_fault,
    damaged_hint,
    first_problem,
)
from metarl.archives.schema import MIGRATIONS, SCHEMA_VERSION

logger = logging.getLogger(__name__)
OUR_TABLES = {"runs", "candidates", "evaluations", "parents", "calls", "messages"}


class ArchiveConnection:
    """An open archive file: the connection, its transactions, its checks and its schema.

    Every SQL statement runs through `__init__`, `transaction()` or `query()`, which turn a
    failing one into an `ArchiveFault` (faults.py): a full disk, a damaged file or a held lock
    is one line with a hint, whichever command meets it. `Archive` (store.py) adds the records.
    """

    def __init__(self, path: str | os.PathLike, *, must_exist: bool = False):
        """Open (or create) the archive, check its pages, and migrate it to this schema.

        Opening runs `PRAGMA quick_check` (faults.first_problem), so a damaged file is
        refused before any command reads half of it: its cost grows with the file, 0.35-0.55 s
        for a 414 MB archive of 10,000 candidates, nothing measurable for a small one.

        Args:
            path: the archive file.
            must_exist: refuse to create it (the commands that only read).

        Raises:
            ArchiveError: no such file (with `must_exist`), a folder, a newer schema, or a
                SQLite file that is not an archive.
            ArchiveDamaged: the file is not a SQLite database, or quick_check found a problem.
            ArchiveFault: SQLite failed otherwise (a read-only file, a held lock).
        """
        self.path = Path(path)
        if self.path.is_dir():
            raise ArchiveError(f"{self.path} is a directory, not an archive file")
        if must_exist and not self.path.exists():
            raise ArchiveError(
                f"no archive at {self.path}",
                hint="run `metarl discover` first, or pass --archive PATH",
            )
        if not self.path.parent.exists():
            raise ArchiveError(
                f"cannot create {self.path}: folder {self.path.parent} does not exist"
            )
        self._lock = threading.RLock()
        try:
            conn = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False)
        except sqlite3.Error as error:
            raise archive_fault(error, self.path) from None
        try:
            conn.isolation_level = None  # transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
            conn.row_factory = sqlite3.Row
            self.db = Database(conn)
            self.conn = conn
            conn.execute("PRAGMA busy_timeout = 60000")
            self._check_pages()  # before the first write (journal mode, migrations)
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except ArchiveError:  # damaged, newer, not an archive (a fault is a sqlite3.Error too)
            conn.close()  # nothing was written through it: closing cannot lose anything
            raise
        except sqlite3.Error as error:
            conn.close()
            raise archive_fault(error, self.path) from None

    # -- plumbing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection; a failure is logged, never raised (the file stays consistent:
        every write was its own committed transaction)."""
        try:
            self.conn.close()
        except sqlite3.Error:
            logger.warning("closing the archive %s failed", self.path, exc_info=True)

    def __enter__(self) -> "ArchiveConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[Database]:
        """One atomic write. Nested calls join the outer transaction.

        Raises:
            ArchiveFault: a statement inside, or the BEGIN or COMMIT, failed in SQLite (a full
                disk: ArchiveFull); the transaction is rolled back, so the file holds every
                earlier write and nothing of this one.
        """
        with self._lock:
            if self.conn.in_transaction:
                yield self.db
                return
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise archive_fault(error, self.path) from error
            try:
                yield self.db
            except BaseException as error:
                self._rollback()
                if isinstance(error, sqlite3.Error) and not isinstance(error, ArchiveError):
                    raise archive_fault(error, self.path) from error
                raise
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error as error:
                # a COMMIT that fails (a full disk) leaves the transaction open: closed here, or
                # every later transaction() would join it and never be committed
                self._rollback()
                raise archive_fault(error, self.path) from error

    def _rollback(self) -> None:
        """Roll back the open transaction, unless SQLite already did (it does after some
        errors, e.g. SQLITE_FULL). A failing ROLLBACK is logged, not raised: the error that
        led here is the one to report, and SQLite discards an unfinished transaction anyway
        when the connection closes."""
        if not self.conn.in_transaction:
            return
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error as error:
            logger.warning("rolling back a transaction on %s failed: %s", self.path, error)

    def _check_pages(self) -> None:
        """Raises ArchiveDamaged when `PRAGMA quick_check` finds a problem (see
        `faults.first_problem` for what it sees, what it cannot, and what it costs)."""
        problem = first_problem(self.conn)
        if problem is not None:
            raise ArchiveDamaged(
                f"{self.path} is damaged ({problem})", reason=problem, hint=damaged_hint(self.path)
            )

    @property
    def schema_version(self) -> int:
        """The archive's `PRAGMA user_version`.

        Raises:
            ArchiveFault: SQLite could not read it.
        """
        return self.query("PRAGMA user_version")[0]["user_version"]

    def _migrate(self) -> None:
        version = self.schema_version
        if version > SCHEMA_VERSION:
            raise ArchiveError(
                f"{self.path} was written by a newer metarl (schema {version}; this one reads "
                f"up to {SCHEMA_VERSION})",
                hint="upgrade metarl",
            )
        if version == SCHEMA_VERSION:
            return
        existing = set(self.db.table_names())
        if version == 0 and existing and not existing & OUR_TABLES:
            raise ArchiveError(f"{self.path} is a SQLite file but not a metarl archive")
        with self.transaction():
            version = self.schema_version  # another process may have migrated meanwhile
            for step in range(version, SCHEMA_VERSION):
                MIGRATIONS[step](self.db)
            self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def query(self, sql: str, params=()) -> list[dict]:
        """The rows of one statement, as dicts.

        Raises:
            ArchiveFault: SQLite failed (a damaged page read, a held lock, a full disk).
        """
        with self._lock:
            try:
                return [dict(row) for row in self.conn.execute(sql, params).fetchall()]
            except sqlite3.Error as error:
                raise archive_fault(error, self.path) from error

    def integrity_check(self) -> str:
        """`PRAGMA integrity_check`'s first line: "ok", or its first complaint (slower and
        more thorough than the quick_check made on opening: it also matches indexes to their
        tables)."""
        return str(next(iter(self.query("PRAGMA integrity_check")[0].values())))
