"""A trainer's view of JAX's persistent compilation cache: read the shared cache, write only a
private staging directory, and let the parent commit what a cleanly finished trainer added.

Why (found by an attacker): trainers wrote the shared cache (METARL_CACHE_DIR/xla) directly,
and JAX writes an entry with a plain `write_bytes`: a trainer that crashed or was killed while
writing (a byte-flipped artifact crashing JAX's deserialiser did exactly that) could leave a
truncated executable that every later trainer would load.

How: each trainer worker gets its own staging directory (inside the parent's private directory
for that worker, never inside METARL_CACHE_DIR), bound writable where JAX's cache directory
points. Before the job is handed over, the parent fills it with symlinks to every entry of the
shared cache as the trainer sees it (bound read-only at isolation.SANDBOX_CACHE), so a repeated
program is still loaded, not compiled (measured on the 2-core CPU: a CartPole program's 13.1 s
compile became a 1.9 s load); JAX writes a new entry next to them. After the worker was killed
and reaped, the parent commits its new entries only when the job finished with a result
(`commit`): each regular, singly linked `*-cache` file of at most MAX_STAGED_MB is copied to a
temporary file in the cache and renamed into place (atomic, and never over an existing entry);
symlinks, other names and oversized files are skipped. A trainer that crashed, timed out, ran
out of memory or was stopped has its staging directory removed unread (`discard`), so nothing
it wrote reaches the cache.

The parent alone writes the cache. tests/test_os_limits.py checks both halves: a trainer
stopped mid-run adds nothing (not even a partial file), a clean run's entries are loaded by
the next run, which adds none.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

ENTRY = re.compile(r"[A-Za-z0-9_.\-]+-cache")  # JAX's LRUCache names an entry `<key>-cache`
MAX_STAGED_MB = 1024  # the most one trainer may add to the cache (entries are ~1-50 MB)


class Staging:
    """One trainer's staging directory for the compilation cache at `cache`."""

    def __init__(self, cache: str, path: str):
        """Args:
        cache: the shared cache directory on the host (created when missing).
        path: the staging directory to create (it must not exist; its parent must).
        """
        self.cache = Path(cache)
        self.cache.mkdir(parents=True, exist_ok=True)
        self.path = Path(path)
        self.path.mkdir(mode=0o700)
        self._linked: set[str] = set()

    def link(self, inside: str) -> int:
        """Symlink every entry of the cache not yet linked into the staging directory, pointing
        at `inside` (where the worker sees the cache); the number of new links."""
        added = 0
        try:
            names = os.listdir(self.cache)
        except OSError as error:
            logger.warning("cannot list the compilation cache %s: %s", self.cache, error)
            return 0
        for name in names:
            if name in self._linked or not ENTRY.fullmatch(name):
                continue
            try:
                os.symlink(os.path.join(inside, name), self.path / name)
            except FileExistsError:
                pass  # the trainer already wrote that entry itself
            except OSError as error:
                logger.warning("cannot link cache entry %s: %s", name, error)
                continue
            self._linked.add(name)
            added += 1
        return added

    def commit(self) -> int:
        """Copy the trainer's new entries into the cache (temp file, then rename); the number
        committed. Call only after the trainer finished with a result and was reaped."""
        committed, budget = 0, MAX_STAGED_MB * 2**20
        try:
            names = sorted(os.listdir(self.path))
        except OSError as error:
            logger.warning("cannot list the staging directory %s: %s", self.path, error)
            names = []
        for name in names:
            source = self.path / name
            try:
                info = os.lstat(source)
            except OSError:
                continue
            if (
                not ENTRY.fullmatch(name)
                or not stat.S_ISREG(info.st_mode)
                or info.st_nlink != 1
                or info.st_size == 0
                or info.st_size > budget
                or (self.cache / name).exists()
            ):
                continue
            if self._install(source, name):
                committed += 1
                budget -= info.st_size
        self.discard()
        return committed

    def _install(self, source: Path, name: str) -> bool:
        """Copy `source` into the cache as `name`: a temp file in the cache, renamed."""
        fd, temporary = tempfile.mkstemp(dir=self.cache, prefix=".staged-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out, open(source, "rb", opener=_no_follow) as data:
                shutil.copyfileobj(data, out)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temporary, 0o644)
            os.replace(temporary, self.cache / name)
            return True
        except OSError as error:
            logger.warning("cannot commit compilation cache entry %s: %s", name, error)
            try:
                os.unlink(temporary)
            except OSError:
                pass
            return False

    def discard(self) -> None:
        """Remove the staging directory and everything in it, unread."""
        shutil.rmtree(self.path, ignore_errors=True)


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)
