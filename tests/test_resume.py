"""Exact resume after SIGKILL: a real `metarl discover` process, a real SQLite file.

The run is killed at a random point (after its first child is archived, plus a random delay),
the file must pass `PRAGMA integrity_check`, and `metarl resume` must finish the run with the
same programs, fates and scores, in the same order, as an uninterrupted run with the same seed:
only in-flight evaluations are lost (re-done), never a proposal or an archived candidate.
While the run writes, this test process reads the archive (leaderboard, runs, integrity)
and must never be blocked or see an inconsistent state.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import TINY_DISCOVER, metarl_cli

from metarl.archives import Archive
from metarl.archives.queries import leaderboard
from metarl.archives.runs import listed_runs

RUN_ARGS = [*TINY_DISCOVER, "--budget", "3", "--children", "2", "--rng-seed", "5"]


def _children(path) -> list[dict]:
    with Archive(path, must_exist=True) as archive:
        return [r for r in archive.run_candidates("r2") if not r["is_seed"]]


def _signature(path) -> list[tuple]:
    return [
        (
            r["id"],
            r["code"],
            r["status"],
            r["stage"],
            r["fitness"],
            r["confirmed_fitness"],
            tuple(r["parent_ids"] or ()),
            r["generation"],
            r["island"],
        )
        for r in _children(path)
    ]


def _start(path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from metarl.cli.app import main; main()",
            "discover",
            *RUN_ARGS,
            "--archive",
            str(path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        # as from a terminal: a shell that runs the test suite in the background ignores
        # SIGINT, the child would inherit that, and Python then installs no Ctrl-C handler
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _read_while_running(path, proc, rng: random.Random, min_children: int) -> dict:
    """Poll the archive from this (second) process until run r2 exists with `min_children`
    children, then wait a random extra delay; every read must succeed quickly and see
    consistent rows."""
    reads = 0
    slowest = 0.0
    deadline = time.monotonic() + 400
    target = None
    while proc.poll() is None and time.monotonic() < deadline:
        start = time.perf_counter()
        conn = sqlite3.connect(str(path), timeout=2)
        try:
            candidates = conn.execute(
                "SELECT count(*) FROM candidates WHERE run_id = 'r2' AND is_seed = 0"
            ).fetchone()[0]
            orphans = conn.execute(
                "SELECT count(*) FROM evaluations e LEFT JOIN candidates c ON c.id = "
                "e.candidate_id "
                "WHERE c.id IS NULL"
            ).fetchone()[0]
            assert orphans == 0  # never half a candidate
        finally:
            conn.close()
        with Archive(path, must_exist=True) as archive:
            started = bool(archive.query("SELECT 1 FROM runs WHERE id = 'r2'"))
            if started:
                leaderboard(archive, run_id="r2")
        slowest = max(slowest, time.perf_counter() - start)
        reads += 1
        # the kill comes once the run exists (before that there is nothing to resume; a busy
        # machine can take seconds to start it), at a random moment after
        if target is None and started and candidates >= min_children:
            target = time.monotonic() + rng.uniform(0.0, 6.0)
        if target is not None and time.monotonic() >= target:
            break
        time.sleep(0.2)
    return {"reads": reads, "slowest": slowest}


def _kill_and_check(path, proc) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


@pytest.fixture
def reference(seeded_archive_template, tmp_path_factory, metarl_cache):
    """The same run, uninterrupted."""
    path = tmp_path_factory.mktemp("reference") / "ref.db"
    shutil.copy(seeded_archive_template, path)
    result = metarl_cli("discover", *RUN_ARGS, "--archive", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    return _signature(path)


@pytest.mark.slow  # end to end: a reference run, then a killed and resumed one (~50 s)
def test_sigkill_then_resume_is_exact(seeded_archive, reference, metarl_cache):
    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    proc = _start(seeded_archive)
    reads = _read_while_running(seeded_archive, proc, rng, min_children=1)
    before = _signature(seeded_archive)
    _kill_and_check(seeded_archive, proc)
    assert reads["reads"] > 0 and reads["slowest"] < 2.0, reads
    # what was archived before the kill is a prefix-consistent part of the reference run
    assert set(before) <= set(reference), f"kill seed {seed}"
    with Archive(seeded_archive, must_exist=True) as archive:
        shown = {r["id"]: r["shown_status"] for r in listed_runs(archive)}
    assert shown["r2"] in ("killed", "finished")
    runs = metarl_cli("runs", "--archive", str(seeded_archive))
    assert runs.returncode == 0
    result = metarl_cli("resume", "r2", "--archive", str(seeded_archive), "--no-live")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    after = _signature(seeded_archive)
    assert after == reference, f"resume diverged (kill seed {seed})"
    with Archive(seeded_archive, must_exist=True) as archive:
        run = archive.get_run("r2")
        assert run["status"] == "finished" and run["candidates_count"] == 3
        assert run["state"]["generation"] == 2
        assert archive.integrity_check() == "ok"


@pytest.mark.slow
def test_repeated_sigkills(seeded_archive, reference, metarl_cache):
    """Kill the run (and then each resumed process) several times at random points."""
    rng = random.Random(random.randrange(1_000_000))
    proc = _start(seeded_archive)
    _read_while_running(seeded_archive, proc, rng, min_children=0)
    _kill_and_check(seeded_archive, proc)
    for _ in range(3):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from metarl.cli.app import main; main()",
                "resume",
                "r2",
                "--archive",
                str(seeded_archive),
                "--no-live",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(rng.uniform(3.0, 15.0))
        _kill_and_check(seeded_archive, proc)
    result = metarl_cli("resume", "r2", "--archive", str(seeded_archive), "--no-live")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _signature(seeded_archive) == reference


def test_ctrl_c_stops_cleanly(seeded_archive, metarl_cache):
    """SIGINT (Ctrl-C) mid-run: exit 130, a one-line hint, run marked interrupted, file intact."""
    proc = _start(seeded_archive)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        with Archive(seeded_archive, must_exist=True) as archive:
            # the first generation's plan: its batch then trains for several seconds (the
            # last generation's lone child may fail its probes in well under a second)
            if archive.query(
                "SELECT 1 FROM runs WHERE id = 'r2' AND state LIKE "
                '\'%"plan": {"generation": 1,%\''
            ):
                break
        time.sleep(0.2)
    time.sleep(0.5)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert err.strip().splitlines() == [
        "interrupted; the archive is consistent. Continue with: "
        f"metarl resume r2 --archive {seeded_archive}"
    ]
    with Archive(seeded_archive, must_exist=True) as archive:
        run = archive.get_run("r2")
        assert run["status"] == "interrupted" and archive.integrity_check() == "ok"
        assert run["state"]["plan"] is not None  # the generation's proposals survive for resume


def test_ctrl_c_while_the_baselines_train_prints_one_line(tmp_path):
    """Ctrl-C in a new run's first minutes, while its baselines train (a cold cache): the
    workers stopped under the batch are an interruption, not a failure; stderr holds the one
    line saying how to resume, no traceback and no "baseline failed"."""
    cache = tmp_path / "cache"
    path = tmp_path / "metarl.db"
    proc = _start(path, env={"METARL_CACHE_DIR": str(cache)})
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if path.exists():
            with Archive(path, must_exist=True) as archive:
                if archive.query("SELECT 1 FROM runs WHERE id = 'r1'"):
                    break
        time.sleep(0.1)
    time.sleep(1.0)
    with Archive(path, must_exist=True) as archive:
        seeds_scored = archive.query("SELECT count(*) AS n FROM candidates")[0]["n"]
    baselines = list((cache / "baselines").glob("*.json")) if cache.exists() else []
    assert proc.poll() is None and seeds_scored == 0 and not baselines, "too late"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert err.strip().splitlines() == [
        f"interrupted; the archive is consistent. Continue with: metarl resume r1 --archive {path}"
    ]
    with Archive(path, must_exist=True) as archive:
        assert archive.get_run("r1")["status"] == "interrupted"
