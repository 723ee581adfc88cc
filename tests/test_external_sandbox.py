"""Another project's harness (DiscoGen's run_main.py) runs in metarl's sandbox: a hostile
script in its place finds the same walls and limits as a candidate in metarl's own workers."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from metarl.evaluation.external import run_sandboxed
from metarl.evaluation.settings import SandboxLimits

PYTHON_PREFIXES = (sys.prefix, sys.base_prefix)


def run_script(tmp_path: Path, body: str, **limits):
    """`body` as run.py in a fresh task folder, run like a harness: `python run.py`."""
    task = tmp_path / "task"
    task.mkdir()
    (task / "run.py").write_text(textwrap.dedent(body))
    settings = SandboxLimits(**{"timeout_s": 60, "memory_poll_s": 0.05, **limits})
    return run_sandboxed([sys.executable, "run.py"], task, PYTHON_PREFIXES, settings)


def test_the_harness_reads_its_folder_and_prints_its_result(tmp_path):
    run = run_script(tmp_path, "print(len(open('run.py').read().splitlines()))\n")
    assert run.returncode == 0 and run.stopped is None, run.stderr
    assert run.stdout.strip() == "1"
    assert run.isolation == "bubblewrap"


def test_a_hostile_harness_cannot_write_its_folder_read_secrets_or_reach_the_network(
    tmp_path, monkeypatch
):
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's file")
    monkeypatch.setenv("METARL_TEST_API_KEY", "sk-live-do-not-leak")
    run = run_script(
        tmp_path,
        f"""
        import os, socket
        def attempt(name, action):
            try:
                action()
                print(name, "allowed")
            except OSError as error:
                print(name, "denied", type(error).__name__)
        attempt("write-folder", lambda: open("scores.json", "w").write("{{}}"))
        attempt("read-host-file", lambda: open({str(secret)!r}).read())
        attempt("network", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
        print("key", os.environ.get("METARL_TEST_API_KEY"))
        print("xla", os.environ.get("XLA_FLAGS"))
        """,
    )
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(" ", 1) for line in run.stdout.strip().splitlines())
    assert lines["write-folder"].startswith("denied")
    assert lines["read-host-file"].startswith("denied")
    assert lines["network"].startswith("denied")
    assert lines["key"] == "None"
    assert lines["xla"] == "None"  # XLA's defaults, as the harness's authors run it
    assert not (tmp_path / "task" / "scores.json").exists()


def test_a_harness_past_the_wall_clock_is_stopped_with_its_whole_group(tmp_path):
    run = run_script(
        tmp_path,
        """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("started", flush=True)
        time.sleep(600)
        """,
        timeout_s=3,
    )
    assert run.stopped == "wall-clock limit of 3 s"
    assert run.returncode is not None and run.returncode < 0
    assert "started" in run.stdout
    assert run.seconds < 30


def test_a_harness_above_the_memory_limit_runs_out_of_memory(tmp_path):
    """RLIMIT_AS, as in metarl's own workers: the 9th 64 MB block of 1024 MB fails."""
    run = run_script(
        tmp_path,
        """
        blocks = []
        for _ in range(64):
            blocks.append(bytearray(64 * 2**20))
        print("survived")
        """,
        memory_mb=1024,
    )
    assert "survived" not in run.stdout
    assert run.returncode == 1 and "MemoryError" in run.stderr


def test_a_harness_writing_past_the_file_limit_is_killed(tmp_path):
    run = run_script(
        tmp_path,
        """
        import sys
        for _ in range(10_000):
            sys.stdout.write("x" * 4096)
        """,
        max_file_mb=1,
    )
    # RLIMIT_FSIZE at 1 MB of the 40 MB asked (Python ignores SIGXFSZ: the write fails)
    assert run.returncode == 1 and "File too large" in run.stderr
    assert len(run.stdout) <= SandboxLimits().output_chars
