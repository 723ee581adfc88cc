"""A top candidate's code as a run's report shows it, with what changed from its first parent
(a diff of both programs as Python's ast writes them, when both parse)."""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass

from metarl.archives.queries import LeaderRow


@dataclass
class Program:
    """A top candidate's code, and what changed from its first parent."""

    id: str
    name: str
    score: float | None
    score_ci: list[float] | None
    thought: str
    operator: str
    code: str
    parent_id: str | None
    diff: str  # unified diff against the parent's code; "" for a seed program or no parent
    normalised: bool = False  # the diff is of both programs as ast.unparse writes them


def _unparsed(code: str) -> str | None:
    """The program as Python's ast writes it (no comments, one layout), or None if it does not
    parse."""
    try:
        return ast.unparse(ast.parse(code)) + "\n"
    except (SyntaxError, ValueError, RecursionError):
        return None


def program_of(row: dict, parent: dict | None, score_row: LeaderRow | None) -> Program:
    """A top candidate's code and its diff against its parent. A mutation writes its child out
    through `ast.unparse`, which drops comments and changes the layout, so a diff of the raw
    texts marks every line; when both parse, the diff is of both written out the same way,
    which shows only what changed in the program."""
    code = row.get("code") or ""
    diff, normalised = "", False
    if parent is not None and parent.get("code"):
        before, after = _unparsed(parent["code"]), _unparsed(code)
        normalised = before is not None and after is not None
        if not normalised:
            before, after = parent["code"], code
        diff = "".join(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile=parent["id"],
                tofile=row["id"],
            )
        )
    return Program(
        id=row["id"],
        name=row.get("name") or "",
        score=score_row.score if score_row else row.get("fitness"),
        score_ci=(score_row.confirmed_ci or score_row.fitness_ci) if score_row else None,
        thought=row.get("thought") or "",
        operator=row.get("operator") or "",
        code=code,
        parent_id=parent["id"] if parent else None,
        diff=diff,
        normalised=normalised,
    )
