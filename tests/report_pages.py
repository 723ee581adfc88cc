"""Reading a `metarl report` page in tests: its sections and the rows of their tables."""

from __future__ import annotations

import html
import re

SECTION = re.compile(
    r'<section[^>]*data-section="([^"]+)" data-run="([^"]*)">(.*?)</section>', re.S
)
ROW = r'<tr[^>]*data-{attribute}="([^"]*)"[^>]*>(.*?)</tr>'
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
TAG = re.compile(r"<[^>]+>")


def sections(page: str) -> dict[tuple[str, str], str]:
    """(run, section name) -> the section's HTML; run is "" for the comparison."""
    return {(run, name): body for name, run, body in SECTION.findall(page)}


def cells(row_html: str) -> list[str]:
    """A table row's cell texts, tags stripped and entities decoded."""
    return [html.unescape(TAG.sub("", cell)).strip() for cell in CELL.findall(row_html)]


def rows(section: str, attribute: str) -> dict[str, list[str]]:
    """The section's table rows marked `data-ATTRIBUTE="key"`: key -> cell texts (the first row
    of each key)."""
    out: dict[str, list[str]] = {}
    for key, body in re.findall(ROW.format(attribute=attribute), section, re.S):
        out.setdefault(html.unescape(key), cells(body))
    return out
