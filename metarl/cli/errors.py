"""The command line's one error convention: an error a user can cause is one line on stderr,

    metarl <command>: error: <message>

and an exit status, never a traceback:

    2  USAGE    a bad option value or combination, an unknown task or suite, a bad config file,
                a missing input file, a setting a resumed run cannot change
    1  FAILURE  what was asked cannot be done: the archive (missing, unreadable, no such run or
                candidate), the sandbox, a run that cannot go on

(`metarl evaluate` exits 2 when the sandbox cannot run, as its help documents.)

Commands raise `UserError` for the errors they detect themselves; `Group`, the application's
command group, prints it, click's own usage errors and the user-error exceptions of the layers
below (`ConfigError`, `ArchiveError`, ...) as that one line and exits with their status.
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import typer
from typer.core import TyperGroup

from metarl.evaluation.text import printable

PROG = "metarl"
USAGE = 2
FAILURE = 1

# typer.BadParameter is click's BadParameter (or that of the click typer vendors): its base
# UsageError covers every parse error (missing option, bad value, no such command).
UsageError = next(base for base in typer.BadParameter.__mro__ if base.__name__ == "UsageError")


class UserError(Exception):
    """An error the user can fix; `Group` prints it as one line and exits with `code`."""

    def __init__(self, message: str, code: int = USAGE):
        super().__init__(message)
        self.message = message
        self.code = code


def error_line(message: object, command: str | None = None) -> str:
    """`metarl <command>: error: <message>`, with the message folded onto one line and made
    `printable` (it may quote a candidate's reason or an LLM's error)."""
    prefix = f"{PROG} {command}" if command else PROG
    text = re.sub(r"\s*\n\s*", " ", str(message).strip())
    return f"{prefix}: error: {printable(text)}"


def _layer_error_codes() -> list[tuple[type[Exception], int]]:
    """The user-error exceptions of the layers below the CLI and the status each exits with."""
    # lazy: metarl.tasks and metarl.discovery import jax; only a failing command needs these
    from metarl.archives.store import ArchiveError
    from metarl.blackbox.config import ESConfigError
    from metarl.blackbox.es import ESError
    from metarl.discovery.config import ConfigError
    from metarl.discovery.loop import LoopError
    from metarl.evaluation.executors import ExecutorError
    from metarl.evaluation.sandbox import SandboxUnavailable
    from metarl.grpo.settings import GRPOSettingsError, ModelLoadError, TrainError
    from metarl.report.settings import ReportError
    from metarl.rl.suites import UnknownSuite
    from metarl.tasks import UnknownTask

    return [
        (ConfigError, USAGE),
        (ESConfigError, USAGE),
        (ESError, FAILURE),
        (UnknownSuite, USAGE),
        (UnknownTask, USAGE),
        (ArchiveError, FAILURE),
        (LoopError, FAILURE),
        (SandboxUnavailable, FAILURE),
        (ExecutorError, FAILURE),
        (GRPOSettingsError, USAGE),
        (ModelLoadError, FAILURE),
        (TrainError, FAILURE),
        (ReportError, FAILURE),
    ]


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
    except UserError as error:
        command = getattr(ctx, "invoked_subcommand", None)
        raise _exit_with(error.message, command, error.code) from None
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
    except Exception as error:
        command = getattr(ctx, "invoked_subcommand", None)
        for kind, code in _layer_error_codes():
            if isinstance(error, kind):
                raise _exit_with(error, command, code) from None
        raise


class Group(TyperGroup):
    """The `metarl` group: every command's user errors follow the one-line convention."""

    def make_context(self, info_name: str | None, args: list[str], parent=None, **extra: Any):
        with _one_line_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx):
        with _one_line_errors(ctx):
            return super().invoke(ctx)
