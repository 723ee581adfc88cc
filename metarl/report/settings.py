"""How much a report shows: the one source of its defaults (the CLI's options read them)."""

from __future__ import annotations

from dataclasses import dataclass

from metarl.errors import MetarlError


class ReportError(MetarlError):
    """A report that cannot be made (no runs to show, a file that cannot be written); one
    clear line at the CLI."""


@dataclass(frozen=True)
class ReportSettings:
    """Args:
    top: candidates whose learning curves and per-environment scores are drawn.
    code: top candidates whose code (and diff against their parent) is shown.
    lineages: top candidates whose ancestry tree is drawn.
    lineage_depth: generations of ancestors drawn per tree.
    reasons: most common failure reasons listed under the funnel.
    max_points: points drawn per scatter (fitness, LLM calls); beyond it an even sample of
        the rest is drawn next to every incumbent and confirmed candidate, and the page says so.
        Every count, table and line is computed on all rows.
    max_stories: runs drawn in full on a comparison page (the comparison covers every run).
    """

    top: int = 5
    code: int = 3
    lineages: int = 3
    lineage_depth: int = 12
    reasons: int = 10
    max_points: int = 20_000
    max_stories: int = 12

    def __post_init__(self) -> None:
        for name in ("top", "code", "lineages", "lineage_depth", "reasons", "max_points"):
            if getattr(self, name) < 1:
                raise ReportError(f"{name.replace('_', ' ')} must be at least 1")
        if self.max_stories < 0:
            raise ReportError("max stories must be at least 0")
