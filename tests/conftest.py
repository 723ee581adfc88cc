"""Shared fixtures."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metarl.cli.app import app

# The heaviest test files first (seconds of a 2-core run, `bash scripts/test.sh --durations=30`,
# 2026-11-25: report ~75 in one fixture, cascade ~100, seeds ~70, derived ~65, artifact ~55,
# grpo_train ~50, ...): the parallel run (pytest-xdist, one file per worker) hands
# files out in collection order, so the long ones start first and the short ones fill the gaps
# at the end instead of one long file running alone while the other worker idles.
HEAVY_FIRST = (
    "test_report.py",
    "test_cascade.py",
    "test_seeds.py",
    "test_derived.py",
    "test_artifact.py",
    "test_grpo_train.py",
    "test_cli_evaluate.py",
    "test_grpo_reward.py",
    "test_cli_methods.py",
    "test_loop.py",
    "test_es.py",
    "test_batch_training.py",
    "test_os_limits.py",
    "test_batch_faults.py",
    "test_mutation.py",
    "test_stages.py",
)


XLA_CACHE_VARIABLE = "METARL_TEST_XLA_CACHE"


def pytest_configure(config):
    """The tests' own compiled programs go to one JAX persistent cache shared by the run's
    workers (and `.ci/run`'s passes): many tests train the same PPO program in-process
    (CartPole, the baseline, one or two seeds), and each test builds its `jit` afresh, so each
    paid a compile of ~10-25 s on 2 cores. With the cache an identical program is compiled
    once per run and loaded after. Trusted code only: the sandboxed trainers keep their own
    cache, which only the parent writes (evaluation/xla_cache.py). Set here, before any test
    module runs JAX: the cache is read when JAX first compiles."""
    import jax

    if os.environ.get(XLA_CACHE_VARIABLE) is None:  # the controller (or a run without xdist)
        shared = os.environ.get("METARL_TEST_SHARED")
        if shared:  # `.ci/run`'s passes: one folder for all three, removed by `.ci/run`
            path = Path(shared) / "xla-tests"
            path.mkdir(parents=True, exist_ok=True)
        else:  # this run only: removed when it ends
            path = Path(tempfile.mkdtemp(prefix="metarl-test-xla-"))
            config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))
        os.environ[XLA_CACHE_VARIABLE] = str(path)
    jax.config.update("jax_compilation_cache_dir", os.environ[XLA_CACHE_VARIABLE])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def pytest_collection_modifyitems(config, items):
    """Run the heaviest files first (HEAVY_FIRST), each file's tests in their own order."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    position = {}  # file -> where it was first collected: the rest keep their order
    for index, item in enumerate(items):
        position.setdefault(item.path.name, index)
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), position[item.path.name]))


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


def shared_dir(tmp_path_factory) -> Path:
    """A folder every worker of this test run shares: METARL_TEST_SHARED when set (`.ci/run`
    sets it, so that its passes share it too), else the parent of pytest-xdist's per-worker
    temp folders (or this session's own temp folder without xdist)."""
    named = os.environ.get("METARL_TEST_SHARED")
    if named:
        path = Path(named)
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "shared"
    else:
        path = tmp_path_factory.getbasetemp() / "shared"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def exclusive(path: Path):
    """Hold an exclusive lock on `path` (created if missing): one worker builds what the others
    then read."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def metarl_cache(tmp_path_factory):
    """A METARL_CACHE_DIR shared by the test run's workers (and by `.ci/run`'s passes): each
    baseline is trained and each trainer program compiled once per run, not once per worker.
    Both caches are safe to share: entries are keyed by content and written by atomic renames
    (evaluation/baseline_cache.py, evaluation/xla_cache.py). A test that needs a cache of its
    own (cold, or one nobody else writes to while it is watched) makes one."""
    path = shared_dir(tmp_path_factory) / "metarl-cache"
    path.mkdir(exist_ok=True)
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
    with budget 0), built once per test run (the first worker to need it builds it, the others
    wait for it). Runs in a copy of it reuse those evaluations (seeds are cached per archive),
    so each test pays only for its own children."""
    folder = shared_dir(tmp_path_factory)
    path = folder / "seeded.db"
    with exclusive(folder / "seeded.lock"):
        if not (folder / "seeded.done").exists():
            for stale in folder.glob("seeded.db*"):  # a half-built one from a killed run
                stale.unlink()
            result = metarl_cli("discover", *TINY_DISCOVER, "--budget", "0", "--archive", str(path))
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            (folder / "seeded.done").touch()
    return path


@pytest.fixture
def seeded_archive(seeded_archive_template, tmp_path) -> Path:
    path = tmp_path / "metarl.db"
    for suffix in ("", "-wal"):
        source = Path(str(seeded_archive_template) + suffix)
        if source.exists():
            shutil.copy(source, str(path) + suffix)
    return path
