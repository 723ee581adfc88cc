"""Budgets count work: a run ends with a result, and the way out it prints goes on.

`metarl discover` in process, through the real CLI, loop and archive, with the role-aware fake
evaluator of tests/role_evaluator.py in place of training (the budgets are the loop's, not
the evaluator's): a wall-time cap never stops a run before its seed programs and one
generation are scored, and the printed "continue with" line, run as printed, evaluates more
candidates instead of stopping again at once.
"""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import invoke
from role_evaluator import RoleEvaluator

from metarl.archives import Archive
from metarl.discovery import batches
from metarl.discovery.config import DiscoverConfig

ARGS = ["--suite", "smoke", "--seeds", "1", "--seed-values", "0", "--timesteps", "8192"]
ARGS += ["--budget", "6", "--children", "2", "--islands", "1", "--no-live"]


@pytest.fixture
def fake_training(monkeypatch):
    log: list = []
    factory = lambda config: lambda settings, workers: RoleEvaluator(settings, log)  # noqa: E731
    monkeypatch.setattr(batches, "evaluator_factory", factory)
    return log


def children(path) -> list[dict]:
    with Archive(path, must_exist=True) as archive:
        return [r for r in archive.run_candidates("r1") if not r["is_seed"]]


def test_no_wall_time_cap_unless_asked():
    assert DiscoverConfig.max_time is None and DiscoverConfig().budget == 12


def test_a_spent_time_cap_still_scores_the_seeds_and_one_generation(tmp_path, fake_training):
    path = tmp_path / "metarl.db"
    result = invoke("discover", *ARGS, "--max-time", "0.001", "--archive", str(path))
    assert result.exit_code == 0, result.output
    assert "run r1 stopped (time budget of 0.001 s spent after" in result.output
    assert "1 generation scored" in result.output
    assert [r["generation"] for r in children(path)] == [1, 1]
    with Archive(path, must_exist=True) as archive:
        seeds = [r for r in archive.run_candidates("r1") if r["is_seed"]]
    assert seeds and all(r["status"] == "passed" for r in seeds)


def test_the_printed_continue_line_evaluates_more_candidates(tmp_path, fake_training):
    path = tmp_path / "metarl.db"
    first = invoke("discover", *ARGS, "--max-time", "0.001", "--archive", str(path))
    assert first.exit_code == 0, first.output
    [hint] = re.findall(r"^continue with: (metarl resume .*)$", first.output, re.M)
    # the cap raised past what was spent: 30 minutes more, in whole minutes
    assert re.fullmatch(rf"metarl resume r1 --max-time \d+m --archive {re.escape(str(path))}", hint)
    assert len(children(path)) == 2
    second = invoke(*shlex.split(hint)[1:])
    assert second.exit_code == 0, second.output
    assert "run r1 finished (candidate budget spent)" in second.output
    assert len(children(path)) == 6
    assert "continue with" not in second.output
