"""The other methods' commands (`metarl es`, `distil`, `symbolic`) and the leaderboard's
`method` column: bad input is one line and a non-zero exit, and nothing is written."""

from __future__ import annotations

import json

from conftest import invoke

from metarl.archives.store import Archive


def test_es_with_an_odd_population_is_one_line_and_creates_no_archive(tmp_path, restore_logging):
    archive = tmp_path / "metarl.db"
    result = invoke("es", "--population", "5", "--archive", str(archive))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["metarl es: error: --population must be even"]
    assert not archive.exists()


def test_es_for_a_task_it_has_no_network_for_says_what_is_supported(tmp_path, restore_logging):
    result = invoke("es", "--task", "reward", "--archive", str(tmp_path / "a.db"))
    assert result.exit_code == 2 and "drift" in result.output


def test_distil_of_an_unknown_candidate_is_one_line(seeded_archive, restore_logging):
    result = invoke("distil", "r9-9", "--archive", str(seeded_archive))
    assert result.exit_code == 1
    assert "no candidate 'r9-9'" in result.output and len(result.output.splitlines()) == 1


def test_symbolic_with_an_unknown_objective_is_a_usage_error(seeded_archive, restore_logging):
    result = invoke("symbolic", "r1-1", "--objective", "vibes", "--archive", str(seeded_archive))
    assert result.exit_code == 2 and "objective must be one of" in result.output


def test_leaderboard_has_a_method_column_and_filters_by_method(seeded_archive, restore_logging):
    with Archive(seeded_archive) as archive:
        methods = {r["method"] for r in archive.query("SELECT method FROM candidates")}
    assert methods == {"discovery"}
    shown = invoke("leaderboard", "--all", "--archive", str(seeded_archive))
    assert shown.exit_code == 0 and "method" in shown.output and "discovery" in shown.output
    rows = json.loads(
        invoke(
            "leaderboard",
            "--all",
            "--json",
            "--method",
            "discovery",
            "--archive",
            str(seeded_archive),
        ).output
    )
    assert rows and all(row["method"] == "discovery" for row in rows)
    # the methods are the archive's own: no list to extend when a method is added
    none = invoke("leaderboard", "--all", "--method", "es", "--archive", str(seeded_archive))
    assert none.exit_code == 2 and "no run of method 'es'" in none.output
    assert "methods there: discovery" in none.output
    bad = invoke("leaderboard", "--method", "bogus", "--archive", str(seeded_archive))
    assert bad.exit_code == 2 and "no run of method 'bogus'" in bad.output


def test_lpg_on_a_suite_without_grid_levels_is_one_line_and_creates_no_archive(
    tmp_path, restore_logging
):
    archive = tmp_path / "metarl.db"
    result = invoke("es", "--task", "lpg", "--suite", "classic", "--archive", str(archive))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "metarl es: error: the lpg task meta-trains on grid levels: --suite grid-small, grid-random"
    ]
    assert not archive.exists()


def test_an_unknown_curriculum_is_one_line(tmp_path, restore_logging):
    result = invoke(
        "es",
        "--task",
        "lpg",
        "--suite",
        "grid-small",
        "--curriculum",
        "hardest",
        "--archive",
        str(tmp_path / "a.db"),
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "metarl es: error: --curriculum is one of uniform, plr, groove"
    ]


def test_discovery_with_a_curriculum_on_fixed_envs_is_one_line(tmp_path, restore_logging):
    result = invoke(
        "discover",
        "--suite",
        "classic",
        "--curriculum",
        "groove",
        "--archive",
        str(tmp_path / "a.db"),
    )
    assert result.exit_code == 2
    assert "--curriculum draws environments from a distribution suite" in result.output
    assert len(result.output.strip().splitlines()) == 1
