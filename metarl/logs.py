"""Logging: every module logs through `logging.getLogger(__name__)` under the `metarl` logger;
every run, whatever its method (discovery, es, distil, symbolic, grpo), appends its records to
a log file next to its archive while it runs (the run lifecycle, `archives.runs`, attaches
`log_to_file`), and `--verbose` also shows them on stderr. `metarl runs` and `metarl show RUN`
say where a run's log is.

    metarl.db                     the archive
    metarl-logs/r3.log            run r3's log (appended to on resume)

Records quote candidate and model text and the run's options (a URL with credentials): every
handler installed here formats them through one scrubber, which the command line sets to
`metarl.evaluation.text.printable` (escapes made visible, credentials redacted) before any
command runs (`scrub_records_with`; this module sits below that layer, so it cannot import it).
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

ROOT = "metarl"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_scrub: Callable[[str], str] = str


def scrub_records_with(scrub: Callable[[str], str]) -> None:
    """Make every handler of this module pass its formatted records through `scrub`.

    Args:
        scrub: text -> the text safe for a terminal and a log file.
    """
    global _scrub
    _scrub = scrub


class ScrubbingFormatter(logging.Formatter):
    """A formatter whose whole output (message and traceback) goes through the scrubber."""

    def format(self, record: logging.LogRecord) -> str:
        return _scrub(super().format(record))


def run_log_path(archive_path: str | Path, run_id: str) -> Path:
    """Where run `run_id` of the archive at `archive_path` writes its log."""
    archive = Path(archive_path)
    return archive.parent / f"{archive.stem}-logs" / f"{run_id}.log"


@contextmanager
def log_to_file(path: str | Path, level: int = logging.INFO) -> Iterator[Path]:
    """Append the `metarl` logger's records to `path` while the context is open.

    Args:
        path: the log file; its directory is created.
        level: the least severe level written.

    Yields:
        The path, as a Path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(ScrubbingFormatter(FORMAT))
    handler.setLevel(level)
    logger = logging.getLogger(ROOT)
    previous = logger.level
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield path
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        handler.close()


def mute_stderr() -> None:
    """Stop showing the `metarl` logger's records on stderr (the run's log file keeps them).

    After Ctrl-C the threads and workers being torn down may still log their ends; the user
    has been told the one line that matters (how to resume).
    """
    for handler in logging.getLogger(ROOT).handlers:
        if getattr(handler, "_metarl_stderr", False):
            handler.setLevel(logging.CRITICAL + 1)


def log_to_stderr(verbose: bool) -> None:
    """Show the `metarl` logger's records on stderr: INFO and up with `verbose`, else warnings.

    Idempotent: calling it again replaces the handler it added before.
    """
    logger = logging.getLogger(ROOT)
    for handler in list(logger.handlers):
        if getattr(handler, "_metarl_stderr", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._metarl_stderr = True  # type: ignore[attr-defined]
    handler.setFormatter(ScrubbingFormatter("%(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    logger.addHandler(handler)
    if verbose and (logger.level == logging.NOTSET or logger.level > logging.INFO):
        logger.setLevel(logging.INFO)
