"""The command line's consoles, and the one way text reaches them.

Much of what the commands print came from a language model or a candidate's process: thoughts,
names, code, failure reasons, LLM errors. Such text may hold terminal escape sequences (clear
the screen, print a green PASSED, retitle the window, plant a hyperlink) and rich markup
(`[bold green]PASSED[/]`), and a rich `Table` cell or `console.print` given a plain str parses
markup. So every string the commands print goes through `untrusted` (a rich `Text`: never
markup, control characters shown as visible escapes by `metarl.evaluation.text.printable`) or
`say` (the same for a whole line); markup and styles are only ever the CLI's own, given as
`Text` styles.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from metarl.evaluation.text import printable

# Off a terminal (logs, pipes, CI) rich would assume 80 columns and squeeze the tables.
console = Console() if sys.stdout.isatty() else Console(width=140)
err_console = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=140)


def untrusted(text: object, style: str = "") -> Text:
    """Any text as a rich `Text` that is safe to print: never parsed as markup, its control
    characters and escape sequences shown as visible escapes, URL credentials redacted.

    Args:
        text: the text (None is "").
        style: a rich style for the whole text.

    Returns:
        The Text.
    """
    return Text(printable(text), style=style)


def cells(*values: object) -> list[Text]:
    """Table cells: a `Text` is kept (build it with `untrusted`), anything else becomes one."""
    return [value if isinstance(value, Text) else untrusted(value) for value in values]


def say(text: object, *, err: bool = False, style: str = "") -> None:
    """One line on stdout (or stderr): never markup, never highlighted, escapes made visible.

    Args:
        text: the line; it may quote model or candidate text.
        err: print it on stderr.
        style: a rich style for the line.
    """
    (err_console if err else console).print(untrusted(text, style), highlight=False, soft_wrap=True)


class Grid:
    """A two-column grid (bold label, value) whose values are plain text, never markup."""

    def __init__(self):
        self.table = Table.grid(padding=(0, 2))
        self.table.add_column(style="bold")
        self.table.add_column()

    def add_row(self, label: str, value: object) -> None:
        """A row; `value` as in `cells`."""
        self.table.add_row(label, *cells(value))

    def __rich__(self) -> Table:
        return self.table
