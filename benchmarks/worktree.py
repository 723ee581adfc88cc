"""Run a script on an older commit's package, for before/after rows in one benchmark run."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def run_at_commit(ref: str, script: str, argv: list[str]) -> str:
    """Run `script` (a path) with `argv` on commit `ref`'s package; its stdout.

    `ref` is checked out into a temporary git worktree that goes first on PYTHONPATH (the
    sandbox workers inherit it), with a cache directory of its own.

    Raises:
        SystemExit: the script failed there (its stderr's tail is the message).
    """
    root = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="metarl-before-") as scratch:
        tree = os.path.join(scratch, "tree")
        subprocess.run(
            ["git", "-C", root, "worktree", "add", "--detach", tree, ref],
            check=True,
            capture_output=True,
        )
        try:
            environment = dict(
                os.environ, PYTHONPATH=tree, METARL_CACHE_DIR=os.path.join(scratch, "cache")
            )
            done = subprocess.run(
                [sys.executable, script, *argv],
                cwd=tree,
                env=environment,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise SystemExit(
                    f"{ref}: {os.path.basename(script)} failed:\n{done.stderr[-2000:]}"
                )
            return done.stdout
        finally:
            subprocess.run(
                ["git", "-C", root, "worktree", "remove", "--force", tree], capture_output=True
            )
