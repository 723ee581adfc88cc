"""Shared fixtures."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metarl.cli.app import app

# The smallest real discovery setting: CartPole only, 8192 steps, one seed, no time limit.
TINY_DISCOVER = [
    "--suite",
    "smoke",
    "--timesteps",
    "8192",
    "--seeds",
    "1",
    "--seed-values",  # pinned: the tests compare numbers across runs and resumes
    "0",
    "--max-time",
    "none",
    "--no-live",
]


@pytest.fixture(scope="session")
def metarl_cache(tmp_path_factory):
    """A session-wide METARL_CACHE_DIR: baselines are trained once per test session."""
    path = tmp_path_factory.mktemp("metarl-cache")
    previous = os.environ.get("METARL_CACHE_DIR")
    os.environ["METARL_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("METARL_CACHE_DIR", None)
    else:
        os.environ["METARL_CACHE_DIR"] = previous


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(metarl_cache):
    """No test reads or writes the user's ~/.cache/metarl."""
    return metarl_cache


def invoke(*args: str, env: dict | None = None):
    """`metarl ARGS` in this process, through Typer's test runner."""
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def restore_logging():
    """The commands attach a stderr handler to the `metarl` logger; take it off afterwards."""
    logger = logging.getLogger("metarl")
    handlers, level = list(logger.handlers), logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)


def metarl_cli(
    *args: str, timeout: float = 600, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`metarl ARGS` in a fresh process (as a user runs it)."""
    return subprocess.run(
        [sys.executable, "-c", "from metarl.cli.app import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="session")
def seeded_archive_template(tmp_path_factory, metarl_cache) -> Path:
    """An archive in which the drift seeds were evaluated at the TINY_DISCOVER setting (a run
    with budget 0). Runs in a copy of it reuse those evaluations (seeds are cached per
    archive), so each test pays only for its own children."""
    path = tmp_path_factory.mktemp("seeded") / "seeded.db"
    result = metarl_cli("discover", *TINY_DISCOVER, "--budget", "0", "--archive", str(path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return path


@pytest.fixture
def seeded_archive(seeded_archive_template, tmp_path) -> Path:
    path = tmp_path / "metarl.db"
    for suffix in ("", "-wal"):
        source = Path(str(seeded_archive_template) + suffix)
        if source.exists():
            shutil.copy(source, str(path) + suffix)
    return path
