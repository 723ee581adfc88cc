"""The command line's one error convention: an error a user can cause is one line on stderr,

    metarl <command>: error: <message>

and an exit status, never a traceback:

    2  USAGE    a bad option value or combination, an unknown task or suite, a bad config file,
                a missing input file, a setting a resumed run cannot change
    1  FAILURE  what was asked cannot be done: the archive (missing, unreadable, no such run or
                candidate), the sandbox, a run that cannot go on

(`metarl evaluate` exits 2 when the sandbox cannot run, as its help documents.)

Every error a user can cause derives from `metarl.errors.MetarlError`, whichever layer
raises it (`ConfigError`, `ArchiveError`, ... and `UserError`, raised by the commands for what
they detect themselves); it carries its exit status and an optional hint. `Group`, the
application's command group, maps that one class, and click's own usage errors, to the one line

    metarl <command>: error: <message>; hint: <hint>

and exits with its status: a new error class needs nothing here.

That holds for the archive file too: a full disk, a damaged file or a held lock reaches a
command as an `ArchiveFault` (metarl/archives/faults.py), a `MetarlError`, because the archive
turns every sqlite3 error into one where the SQL runs (`Archive.__init__`, `transaction`,
`query`). So no command prints a sqlite3 traceback, and nothing here knows sqlite3.
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import typer
from typer.core import TyperGroup

from metarl.errors import FAILURE, USAGE, MetarlError, describe
from metarl.evaluation.text import printable

__all__ = ["FAILURE", "USAGE", "Group", "UserError", "error_line"]  # FAILURE, USAGE: for commands

PROG = "metarl"

# typer.BadParameter is click's BadParameter (or that of the click typer vendors): its base
# UsageError covers every parse error (missing option, bad value, no such command).
UsageError = next(base for base in typer.BadParameter.__mro__ if base.__name__ == "UsageError")


class UserError(MetarlError):
    """An error a command detects itself; `Group` prints it as one line and exits with `code`."""

    def __init__(self, message: str, code: int = USAGE, hint: str | None = None):
        """Args:
        message: what went wrong, one line.
        code: the exit status (USAGE or FAILURE).
        hint: what the user can do about it.
        """
        super().__init__(message, hint=hint)
        self.exit_code = code

    @property
    def code(self) -> int:
        """The exit status (the same as `exit_code`)."""
        return self.exit_code


def error_line(message: object, command: str | None = None) -> str:
    """`metarl <command>: error: <message>`, with the message folded onto one line and made
    `printable` (it may quote a candidate's reason or an LLM's error)."""
    prefix = f"{PROG} {command}" if command else PROG
    text = re.sub(r"\s*\n\s*", " ", str(message).strip())
    return f"{prefix}: error: {printable(text)}"


def _exit_with(message: object, command: str | None, code: int) -> typer.Exit:
    typer.echo(error_line(message, command), err=True)
    return typer.Exit(code)


@contextmanager
def _one_line_errors(ctx=None) -> Iterator[None]:
    """Turn user errors raised inside into one line and an exit; `ctx` is the group's context,
    whose `invoked_subcommand` names the command in the line."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except MetarlError as error:
        command = getattr(ctx, "invoked_subcommand", None)
        raise _exit_with(describe(error), command, error.exit_code) from None
    except UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # `metarl` alone prints its help
            raise
        where = getattr(error, "ctx", None)  # the context that failed to parse, if any
        if where is not None:
            command = where.info_name if where.parent is not None else None
        else:
            command = getattr(ctx, "invoked_subcommand", None)
        raise _exit_with(error.format_message(), command, USAGE) from None
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (`| head`): no complaint at exit
        raise typer.Exit(0) from None


class Group(TyperGroup):
    """The `metarl` group: every command's user errors follow the one-line convention."""

    def make_context(self, info_name: str | None, args: list[str], parent=None, **extra: Any):
        with _one_line_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx):
        with _one_line_errors(ctx):
            return super().invoke(ctx)
