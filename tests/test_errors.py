"""One error family: every error a user can cause derives from `metarl.errors.MetarlError`, and
the CLI maps that one class (message, hint, exit status) to one line on stderr, with no list of
the layers' classes to keep in step with them."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import typer
from conftest import invoke
from typer.testing import CliRunner

from metarl.cli.errors import Group, UserError
from metarl.errors import FAILURE, USAGE, MetarlError, describe

PACKAGE = Path(__file__).resolve().parent.parent / "metarl"
ERRORS_MODULE = PACKAGE / "cli" / "errors.py"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _declared_subclasses() -> list[tuple[str, str]]:
    """(module, class name) of every class in the package that derives from MetarlError, read
    from the source (so that a module no test imports is found too)."""
    classes = []  # (module, name, base names)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                classes.append((_module_name(path), node.name, bases))
    family = {"MetarlError"}
    while True:
        grown = family | {name for _, name, bases in classes if bases & family}
        if grown == family:
            break
        family = grown
    family.discard("MetarlError")
    return sorted((module, name) for module, name, _ in classes if name in family)


def _all_subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _all_subclasses(sub)
    return found


DECLARED = _declared_subclasses()


def _error_class(module: str, name: str) -> type:
    return getattr(importlib.import_module(module), name)


def _app_raising(error: BaseException) -> typer.Typer:
    """A `metarl`-like application (the real Group) whose `boom` command raises `error`."""
    app = typer.Typer(
        name="metarl", cls=Group, add_completion=False, pretty_exceptions_enable=False
    )

    @app.command("boom")
    def boom() -> None:
        raise error

    @app.command("other")
    def other() -> None:  # a second command keeps `boom` a subcommand of the group
        return None

    return app


def _one_line(error: BaseException):
    result = CliRunner().invoke(_app_raising(error), ["boom"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.output
    assert len(lines) == 1, result.stderr
    return lines[0], result.exit_code


def test_the_package_declares_the_layers_user_errors_in_the_family():
    names = {name for _, name in DECLARED}
    assert {
        "ArchiveError",
        "LiveRun",
        "ConfigError",
        "ESConfigError",
        "ESError",
        "UnknownSuite",
        "LoopError",
        "SandboxUnavailable",
        "ExecutorError",
        "GRPOSettingsError",
        "ModelLoadError",
        "TrainError",
        "ReportError",
        "SeedError",
        "LLMConfigError",
        "UserError",
    } <= names


def test_every_declared_subclass_is_a_metarl_error_and_none_is_missed():
    declared = {_error_class(module, name) for module, name in DECLARED}
    assert all(issubclass(cls, MetarlError) for cls in declared)
    # once their modules are imported, the runtime family is exactly what the source declares
    package = {c for c in _all_subclasses(MetarlError) if c.__module__.startswith("metarl.")}
    assert package == declared


@pytest.mark.parametrize("module, name", DECLARED, ids=[name for _, name in DECLARED])
def test_every_metarl_error_is_one_line_with_its_hint_and_its_exit_status(module, name):
    cls = _error_class(module, name)
    error = cls("the thing went wrong", hint="do the other thing")
    line, code = _one_line(error)
    assert line == "metarl boom: error: the thing went wrong; hint: do the other thing"
    assert code == error.exit_code and code in (USAGE, FAILURE)


@pytest.mark.parametrize("module, name", DECLARED, ids=[name for _, name in DECLARED])
def test_an_error_without_a_hint_is_its_message_or_its_class_default_hint(module, name):
    cls = _error_class(module, name)
    line, _ = _one_line(cls("the thing went wrong"))
    expected = "metarl boom: error: the thing went wrong"
    assert line == (f"{expected}; hint: {cls.hint}" if cls.hint else expected)


def test_the_cli_error_mapper_lists_no_error_class_of_any_layer():
    tree = ast.parse(ERRORS_MODULE.read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("metarl")
        for alias in node.names
    }
    assert imported <= {"FAILURE", "USAGE", "MetarlError", "describe", "printable"}, imported
    functions = [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    assert not [
        n for f in functions for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))
    ], "no lazy imports of layer errors"
    caught = {
        ast.unparse(handler.type)
        for handler in ast.walk(tree)
        if isinstance(handler, ast.ExceptHandler) and handler.type is not None
    }
    assert caught == {"(typer.Exit, typer.Abort)", "MetarlError", "UsageError", "BrokenPipeError"}
    assert "isinstance" not in ERRORS_MODULE.read_text()


def test_a_keyerror_in_the_family_reads_without_quotes():
    from metarl.rl.suites import UnknownSuite, get_suite

    with pytest.raises(UnknownSuite) as caught:
        get_suite("atari")
    assert str(caught.value).startswith("unknown suite 'atari'")
    assert isinstance(caught.value, KeyError) and caught.value.exit_code == USAGE


def test_describe_puts_the_hint_after_the_message():
    assert describe(MetarlError("no archive at a.db")) == "no archive at a.db"
    assert describe(MetarlError("gone", hint="look again")) == "gone; hint: look again"


def test_a_user_error_keeps_its_code_and_message():
    error = UserError("--seeds must be at least 1")
    assert (error.code, error.exit_code, error.message) == (USAGE, USAGE, error.message)
    assert UserError("nope", FAILURE).exit_code == FAILURE


def test_a_missing_archive_names_what_to_do(tmp_path):
    result = invoke("runs", "--archive", str(tmp_path / "nope.db"))
    assert result.exit_code == FAILURE
    assert result.stderr.strip() == (
        f"metarl runs: error: no archive at {tmp_path / 'nope.db'}; "
        "hint: run `metarl discover` first, or pass --archive PATH"
    )
