"""The SQLite archive: schema and migrations, transactional writes, queries, export."""

from metarl.archives.schema import SCHEMA_VERSION
from metarl.archives.store import Archive, ArchiveError

__all__ = ["Archive", "ArchiveError", "SCHEMA_VERSION"]
