"""CLI start-up: `metarl --help`, every command's help and a usage error answer without
importing the numerical stack (jax, scipy, the archive's sqlite_utils, ...), and the tasks a
help lists are the registry's.

Each case runs in a fresh interpreter, as a user's `metarl` does, and reports at exit which of
those modules got imported. Timings are benchmarks/cli_startup.py's, not a test's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from metarl.cli.app import app
from metarl.tasks import get_task, task_names

# what a help or a usage error must never import (the list)
HEAVY = ("jax", "scipy", "rliable", "pandas", "sqlite_utils", "gymnax", "flax", "optax")
MARK = "cli-startup-imported:"
CODES = "cli-startup-exit-codes:"

# the CLI as the `metarl` script runs it; `--each` runs several command lines in turn in one
# process (a JSON list of argument lists) and reports their exit statuses
PROBE = f"""
import atexit, json, sys
atexit.register(
    lambda: print({MARK!r} + json.dumps([m for m in {HEAVY!r} if m in sys.modules]),
                  file=sys.stderr)
)
from metarl.cli.app import main
if sys.argv[1:2] == ["--each"]:
    codes = []
    for args in json.loads(sys.argv[2]):
        sys.argv = ["metarl", *args]
        try:
            main()
            codes.append(0)
        except SystemExit as stop:
            codes.append(stop.code or 0)
    print({CODES!r} + json.dumps(codes), file=sys.stderr)
else:
    sys.argv = ["metarl", *sys.argv[1:]]
    main()
"""


def run_cli(*args: str) -> tuple[subprocess.CompletedProcess, list[str], str]:
    """`metarl ARGS` in a fresh interpreter: the process, the heavy modules it imported, and
    its stderr without the probe's lines."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    reports = [line for line in done.stderr.splitlines() if line.startswith(MARK)]
    assert reports, done.stderr[-3000:]
    imported = json.loads(reports[-1][len(MARK) :])
    stderr = "\n".join(line for line in done.stderr.splitlines() if not line.startswith(MARK))
    return done, imported, stderr


def exit_codes(stderr: str) -> list[int]:
    """The exit statuses `--each` reported."""
    reports = [line for line in stderr.splitlines() if line.startswith(CODES)]
    assert reports, stderr[-3000:]
    return json.loads(reports[-1][len(CODES) :])


def first_line(text: str) -> str:
    return next(line.strip() for line in text.splitlines() if line.strip())


@pytest.mark.parametrize(
    "args, usage",
    [
        (("--help",), "Usage: metarl [OPTIONS] COMMAND [ARGS]..."),
        (("discover", "--help"), "Usage: metarl discover [OPTIONS]"),
    ],
)
def test_help_imports_nothing_heavy(args, usage):
    done, imported, stderr = run_cli(*args)
    assert done.returncode == 0, stderr
    assert first_line(done.stdout) == usage
    assert stderr == ""
    assert imported == [], f"metarl {' '.join(args)} imported {imported}"


def test_unknown_option_is_one_line_and_imports_nothing_heavy():
    done, imported, stderr = run_cli("discover", "--bogus")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("metarl discover: error: No such option: --bogus"), lines[0]
    assert imported == [], f"metarl discover --bogus imported {imported}"


def test_every_command_help_imports_nothing_heavy():
    names = [command.name for command in app.registered_commands]
    assert "discover" in names and "leaderboard" in names
    command_lines = [["--version"], *([name, "--help"] for name in names)]
    done, imported, stderr = run_cli("--each", json.dumps(command_lines))
    assert done.returncode == 0, stderr[-3000:]
    assert exit_codes(stderr) == [0] * len(command_lines), stderr[-3000:]
    assert imported == [], f"the commands' help imported {imported}"


def test_discover_help_lists_the_registry_tasks():
    done, _, stderr = run_cli("discover", "--help")
    assert done.returncode == 0, stderr
    match = re.search(r"What to discover: ([\w, -]+?)\.", done.stdout)
    assert match, done.stdout
    *rest, last = match.group(1).split(" or ")
    listed = [name for part in rest for name in part.split(", ")] + [last]
    assert listed == task_names()


def test_every_registered_task_is_its_package_task():
    for name in task_names():
        assert get_task(name).name == name
