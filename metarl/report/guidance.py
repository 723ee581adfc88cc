"""The report's guidance section: each version of a discovery run's evolving "what worked /
what failed" notes (discovery/guidance.py) beside how the children proposed under it did, so a
reader can judge whether rewriting the prompt helped the search.

Its own section, as curriculum.py is (story.py tells the run itself); the page attaches it to a
run only when the run has versions (`guidance_of` returns [] otherwise, and the template leaves
the section out). The notes quote programs and failure reasons: they are shown as escaped,
printable text, never as markup.
"""

from __future__ import annotations

from dataclasses import dataclass

from metarl.archives.guidance import outcomes_by_version, run_guidance
from metarl.archives.store import Archive
from metarl.evaluation.text import printable


@dataclass(frozen=True)
class GuidanceRow:
    """One row of the section.

    Attributes:
        version: the version; None for the children planned before the first one.
        generation: the generation after which it was written (None: before any).
        source: "rule" or "llm:<model>" ("" for the row before the first version).
        text: the notes (printable).
        children: children proposed under it.
        passed: how many of them passed every stage.
        best: their best selection score (None when none passed).
    """

    version: int | None
    generation: int | None
    source: str
    text: str
    children: int
    passed: int
    best: float | None

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.children if self.children else None


def guidance_of(archive: Archive, run_id: str) -> list[GuidanceRow]:
    """Run `run_id`'s guidance versions with their children's results, oldest first, after a
    row for the children planned before the first version; [] when the run has no version.

    Args:
        archive: the archive.
        run_id: the run.

    Returns:
        The section's rows.
    """
    versions = run_guidance(archive, run_id)
    if not versions:
        return []
    outcomes = {o.version: o for o in outcomes_by_version(archive, run_id)}
    rows = []
    before = outcomes.get(None)
    if before is not None:
        rows.append(GuidanceRow(None, None, "", "", before.children, before.passed, before.best))
    for guidance in versions:
        seen = outcomes.get(guidance.version)
        rows.append(
            GuidanceRow(
                version=guidance.version,
                generation=guidance.generation,
                source=printable(guidance.source),
                text=printable(guidance.text),
                children=seen.children if seen else 0,
                passed=seen.passed if seen else 0,
                best=seen.best if seen else None,
            )
        )
    return rows
