"""One family for every error a user can cause, whichever layer detects it.

Each layer raises its own subclass (an archive that is missing, an option out of range, a run
that cannot go on), so a caller catches exactly what it handles; all of them derive from
`MetarlError`, which carries what a command line needs to report any of them the same way: a
one-line message, an optional hint saying what to do about it, and an exit status (`USAGE`
for a bad option or input, `FAILURE` when what was asked cannot be done). The CLI maps this one
class, so a new error needs no CLI change. It lives at the package root, below every layer, so
the lowest layer (rl) can derive from it too.

A subclass keeps its builtin base where callers catch that (`class SeedError(MetarlError,
ValueError)`): `MetarlError` comes first, so its one-line `__str__` wins over, e.g., KeyError's
quoting.
"""

from __future__ import annotations

USAGE = 2  # a bad option value or combination, an unknown name, a bad or missing input file
FAILURE = 1  # what was asked cannot be done (the archive, the sandbox, a run that cannot go on)


class MetarlError(Exception):
    """An error a user can cause and fix, reported as one line and an exit status.

    Attributes:
        exit_code: the process exit status it maps to (class default: FAILURE).
        hint: what the user can do about it, or None (class default: None).
    """

    exit_code: int = FAILURE
    hint: str | None = None

    def __init__(self, message: str = "", *, hint: str | None = None):
        """Args:
        message: what went wrong, one line.
        hint: what to do about it; None keeps the class's default hint.
        """
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    @property
    def message(self) -> str:
        """The message the error was raised with (without the hint)."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return self.message


def describe(error: MetarlError) -> str:
    """The error's message and, when it has one, its hint, on one line.

    Args:
        error: the error.

    Returns:
        `message`, or `message; hint: hint`.
    """
    return f"{error.message}; hint: {error.hint}" if error.hint else error.message
