"""SEARCH/REPLACE edits against a parent program, applied tolerantly.

    <<<<<<< SEARCH
    lines copied from the parent
    =======
    new lines
    >>>>>>> REPLACE

Each block is matched exactly first (anywhere for a one-line edit, else from a line start),
then line by line ignoring trailing whitespace, then ignoring indentation (the replacement is
re-indented to where the match was found). A block that matches nowhere raises `DiffError`
naming it, so the proposer can fall back (full code in the same reply, or a repair round-trip
asking for the complete program).
"""

from __future__ import annotations

import re

_BLOCK = re.compile(
    r"^[ \t]*<{5,9}[ \t]*SEARCH[^\n]*\n(.*?)"
    r"^[ \t]*={5,9}[ \t]*\n(.*?)"
    r"^[ \t]*>{5,9}[ \t]*REPLACE[^\n]*$",
    re.S | re.M,
)


class DiffError(ValueError):
    pass


def parse_blocks(text: str) -> list[tuple[str, str]]:
    """(search, replace) pairs found in `text`, in order."""
    return [(s.rstrip("\n"), r.rstrip("\n")) for s, r in _BLOCK.findall(text.replace("\r\n", "\n"))]


def strip_blocks(text: str) -> str:
    """`text` without its SEARCH/REPLACE blocks (to look for a full program beside them)."""
    return _BLOCK.sub("", text.replace("\r\n", "\n"))


def has_blocks(text: str) -> bool:
    return bool(re.search(r"<{5,9}[ \t]*SEARCH", text))


def apply_blocks(source: str, blocks: list[tuple[str, str]]) -> str:
    if not blocks:
        raise DiffError("no complete SEARCH/REPLACE block was found")
    for index, (search, replace) in enumerate(blocks, start=1):
        updated = _apply_one(source, search, replace)
        if updated is None:
            preview = "\n".join(search.splitlines()[:6])
            raise DiffError(
                f"SEARCH block {index} of {len(blocks)} does not match the parent's code "
                f"(it must be copied verbatim); the unmatched SEARCH text begins:\n{preview}"
            )
        source = updated
    return source


def apply_diff(source: str, text: str) -> str:
    return apply_blocks(source, parse_blocks(text))


def _apply_one(source: str, search: str, replace: str) -> str | None:
    if not search.strip():  # an empty SEARCH appends
        return source.rstrip("\n") + "\n" + replace + "\n"
    at = source.find(search)
    inline = "\n" not in search and "\n" not in replace
    if at >= 0 and (inline or at == 0 or source[at - 1] == "\n"):
        return source[:at] + replace + source[at + len(search) :]
    lines = source.splitlines()
    wanted = search.splitlines()
    # trailing whitespace ignored
    at = _find(lines, wanted, lambda s: s.rstrip())
    if at is not None:
        return _splice(lines, at, len(wanted), replace.splitlines(), source)
    # indentation ignored (blank lines in the SEARCH part skipped)
    core = [w for w in wanted if w.strip()]
    at = _find_loose(lines, core)
    if at is None:
        return None
    start, stop = at
    shift = _indent(lines[start]) - _indent(core[0])
    new = [_reindent(line, shift) for line in replace.splitlines()]
    return _splice(lines, start, stop - start, new, source)


def _find(lines: list[str], wanted: list[str], key) -> int | None:
    target = [key(w) for w in wanted]
    for i in range(len(lines) - len(wanted) + 1):
        if [key(x) for x in lines[i : i + len(wanted)]] == target:
            return i
    return None


def _find_loose(lines: list[str], core: list[str]) -> tuple[int, int] | None:
    """Match stripped non-blank lines; returns the [start, stop) span in `lines`."""
    target = [c.strip() for c in core]
    for start in range(len(lines)):
        if lines[start].strip() != target[0]:
            continue
        j, i = 0, start
        while i < len(lines) and j < len(target):
            if not lines[i].strip():
                i += 1
                continue
            if lines[i].strip() != target[j]:
                break
            i, j = i + 1, j + 1
        if j == len(target):
            return start, i
    return None


def _splice(lines: list[str], at: int, count: int, new: list[str], source: str) -> str:
    out = lines[:at] + new + lines[at + count :]
    return "\n".join(out) + ("\n" if source.endswith("\n") else "")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _reindent(line: str, shift: int) -> str:
    if not line.strip():
        return line
    if shift >= 0:
        return " " * shift + line
    return line[min(-shift, _indent(line)) :]
