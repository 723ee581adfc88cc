"""The discover/resume/archive CLI: every error a user can cause is one clear line and a
non-zero exit, never a traceback; and the read commands render a real archive."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from conftest import invoke

from metarl.archives import Archive
from metarl.evaluation.outcome import EnvScore, Outcome

pytestmark = pytest.mark.usefixtures("restore_logging")


def assert_user_error(result, *fragments: str) -> None:
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def archive_path(tmp_path):
    """A small archive written directly (no training): one run, a seed, a child, a failure."""
    path = tmp_path / "a.db"
    env = EnvScore(
        "CartPole-v1",
        [0],
        8192,
        [40.0],
        40.0,
        0.0,
        1.0,
        40.0,
        20.0,
        curve_steps=[0, 4096],
        curve=[20.0, 40.0],
    )
    with Archive(path) as archive:
        run = archive.create_run(
            task="drift",
            suite="smoke",
            proposer="mutation",
            budget_candidates=2,
            config={"task": "drift", "suite": "smoke", "seeds": 1, "timesteps": 8192, "budget": 2},
            state={"version": 1},
        )
        base = {
            "run_id": run,
            "task": "drift",
            "suite": "smoke",
            "seeds": [0],
            "total_timesteps": 8192,
            "eval_key": "k",
            "generation": 0,
            "is_seed": 0,
        }
        archive.record_candidate(
            {
                **base,
                "id": "r1-0",
                "seq": 0,
                "hash": "aaaa1111",
                "name": "ppo_clip",
                "code": "def drift(ratio, advantage, epsilon):\n    return ratio * 0\n",
                "is_seed": 1,
                "proposer": "seed",
                "parent_ids": [],
            },
            Outcome(True, "full", env_scores=[env], fitness=1.0),
        )
        archive.record_candidate(
            {
                **base,
                "id": "r1-1",
                "seq": 1,
                "hash": "bbbb2222",
                "name": "ppo_clip.x",
                "code": "def drift(ratio, advantage, epsilon):\n    return ratio * 0.0\n",
                "parent_ids": ["r1-0"],
                "generation": 1,
                "proposer": "mutation:constant",
                "thought": "constant 0 -> 0.0",
            },
            Outcome(True, "full", env_scores=[env], fitness=1.2),
            calls=[
                {
                    "model": "m",
                    "prompt": [{"role": "user", "content": "write"}],
                    "reply": "ok",
                    "prompt_tokens": 5,
                    "completion_tokens": 2,
                    "cost_usd": 0.001,
                    "latency_s": 0.3,
                }
            ],
        )
        archive.record_candidate(
            {
                **base,
                "id": "r1-2",
                "seq": 2,
                "hash": "cccc3333",
                "name": "bad",
                "code": "import os\n",
                "parent_ids": ["r1-1"],
                "generation": 1,
            },
            Outcome.failure("static", "line 1: import of os is not allowed"),
        )
    return str(path)


# -- the read commands work ----------------------------------------------------------------------


def test_read_commands_render(archive_path):
    result = invoke("leaderboard", "--archive", archive_path)
    assert result.exit_code == 0 and "ppo_clip.x" in result.stdout and "seed" in result.stdout
    assert "bad" not in result.stdout  # failures are not ranked
    result = invoke(
        "leaderboard",
        "--all",
        "--task",
        "drift",
        "--suite",
        "smoke",
        "--archive",
        archive_path,
        "--json",
    )
    assert result.exit_code == 0 and json.loads(result.stdout)[0]["id"] == "r1-1"
    result = invoke("show", "r1-1", "--archive", archive_path)
    assert result.exit_code == 0
    for fragment in (
        "constant 0 -> 0.0",
        "return ratio * 0.0",
        "CartPole-v1",
        "LLM call 1/1",
        "model m",
    ):
        assert fragment in result.stdout
    result = invoke("show", "cccc", "--archive", archive_path)  # a hash prefix works too
    assert result.exit_code == 0 and "import of os is not allowed" in result.stdout
    result = invoke("lineage", "r1-2", "--archive", archive_path)
    assert result.exit_code == 0 and "r1-1" in result.stdout and "r1-0" in result.stdout
    result = invoke("runs", "--archive", archive_path)
    assert result.exit_code == 0 and "r1" in result.stdout
    result = invoke("export", "r1", "--archive", archive_path)
    assert result.exit_code == 0 and len(json.loads(result.stdout)["candidates"]) == 3
    result = invoke("export", "r1", "--format", "csv", "--archive", archive_path)
    assert result.exit_code == 0 and result.stdout.splitlines()[0].startswith("id,run_id")


COMMANDS = ("evaluate", "discover", "resume", "leaderboard", "show", "lineage", "runs", "export")


def test_help_has_examples():
    for command in COMMANDS:
        result = invoke(command, "--help")
        assert result.exit_code == 0 and "Examples:" in result.stdout, command
        assert f"metarl {command} " in result.stdout.split("Examples:")[1], command


def test_every_command_is_a_module_level_function():
    from metarl.cli import archive, discover, evaluate

    modules = {"evaluate": evaluate, "discover": discover, "resume": discover}
    for command in COMMANDS:
        function = getattr(modules.get(command, archive), command)
        assert callable(function) and function.__module__.startswith("metarl.cli."), command
        assert "Examples:" in function.__doc__, command


def test_discover_help_shows_the_config_defaults():
    from metarl.cli.formats import fmt_duration
    from metarl.discovery.config import DiscoverConfig

    assert [fmt_duration(s) for s in (540.0, 3600.0, 90.0, None)] == ["9m", "1h", "90s", "none"]
    result = invoke("discover", "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if "│ --" in line}
    for option, value in (
        ("--task", DiscoverConfig.task),
        ("--suite", DiscoverConfig.suite),
        ("--proposer", DiscoverConfig.proposer),
        ("--budget", DiscoverConfig.budget),
        ("--workers", DiscoverConfig.workers),
        ("--seeds", DiscoverConfig.seeds),
        ("--children", DiscoverConfig.children),
        ("--islands", DiscoverConfig.islands),
        ("--population", DiscoverConfig.population),
    ):
        assert f"[default: {value}]" in lines[option], lines[option]
    # the budget's default is the protocol's on its own suite, else the suite's (Suite.budget)
    assert DiscoverConfig.timesteps is None
    assert "the protocol's on its suite" in lines["--timesteps"]
    for option in ("--max-cost", "--max-time"):  # no default: no limit (budgets count work)
        assert "[default:" not in lines[option], lines[option]
    # the options still default to None, so that a --config file can set them
    from metarl.cli.discover import _collect

    assert _collect(None, {}).budget == DiscoverConfig.budget


# -- user errors: one line, non-zero, no traceback ------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["leaderboard"],
        ["show", "r1-1"],
        ["lineage", "r1-1"],
        ["runs"],
        ["export", "r1"],
        ["resume", "r1"],
        ["discover", "--resume", "r1"],
    ],
)
def test_missing_archive(command, tmp_path):
    assert_user_error(invoke(*command, "--archive", str(tmp_path / "nope.db")), "no archive at")


def test_error_line_names_the_command_and_the_exit_status_tells_usage_from_failure(
    archive_path, tmp_path
):
    db = str(tmp_path / "new.db")
    cases = [
        (["discover", "--suite", "atari", "--archive", db, "--no-live"], "discover", 2),
        (["discover", "--budget", "x", "--archive", db], "discover", 2),
        (["discover", "--max-time", "soon", "--archive", db], "discover", 2),
        (["discover", "--bogus"], "discover", 2),
        (["leaderboard", "--limit", "0", "--archive", archive_path], "leaderboard", 2),
        (["show", "--archive", archive_path], "show", 2),  # missing argument
        (["export", "r1", "--format", "xml", "--archive", archive_path], "export", 2),
        (["show", "r1-99", "--archive", archive_path], "show", 1),
        (["resume", "r9", "--archive", archive_path], "resume", 1),
        (["runs", "--archive", str(tmp_path / "nope.db")], "runs", 1),
        (["frobnicate"], None, 2),
    ]
    for args, command, code in cases:
        result = invoke(*args)
        assert_user_error(result)
        prefix = f"metarl {command}: error: " if command else "metarl: error: "
        assert result.stderr.startswith(prefix), (args, result.stderr)
        assert result.exit_code == code, (args, result.exit_code, result.stderr)


def test_commands_raise_user_errors_when_called_directly(archive_path):
    from metarl.cli import archive
    from metarl.cli.errors import USAGE, UserError

    with pytest.raises(UserError) as caught:
        archive.leaderboard(
            run="r1", all_runs=True, task=None, suite=None, limit=5, archive=archive_path
        )
    assert caught.value.code == USAGE and "either --run" in caught.value.message


def test_lineage_called_directly_prints_the_tree(archive_path, capsys):
    from metarl.cli import archive

    archive.lineage(candidate="r1-2", archive=archive_path, depth=5)
    out = capsys.readouterr().out
    assert out.index("r1-2") < out.index("r1-1") < out.index("r1-0")


def test_discover_and_resume_take_verbose(archive_path):
    for command in (["resume", "r9"], ["discover", "--resume", "r9"]):
        result = invoke(*command, "--verbose", "--archive", archive_path)
        assert_user_error(result, "no run 'r9'")


def test_unknown_run_and_candidate(archive_path):
    assert_user_error(
        invoke("leaderboard", "--run", "r9", "--archive", archive_path), "no run 'r9'", "r1"
    )
    assert_user_error(invoke("export", "r9", "--archive", archive_path), "no run 'r9'")
    assert_user_error(invoke("resume", "r9", "--archive", archive_path), "no run 'r9'")
    assert_user_error(
        invoke("discover", "--resume", "r9", "--archive", archive_path), "no run 'r9'"
    )
    assert_user_error(invoke("show", "r1-99", "--archive", archive_path), "no candidate 'r1-99'")
    assert_user_error(invoke("lineage", "zzzzzz", "--archive", archive_path), "no candidate")


def test_bad_names(archive_path, tmp_path):
    db = str(tmp_path / "new.db")
    assert_user_error(
        invoke("discover", "--suite", "atari", "--archive", db, "--no-live"),
        "unknown suite 'atari'",
        "classic",
    )
    assert_user_error(
        invoke("discover", "--task", "value", "--archive", db, "--no-live"),
        "unknown task 'value'",
        "drift",
    )
    assert_user_error(
        invoke("discover", "--proposer", "gpt", "--archive", db, "--no-live"), "unknown proposer"
    )
    assert_user_error(
        invoke("discover", "--proposer", "llm", "--archive", db, "--no-live"), "--model"
    )
    assert_user_error(
        invoke("discover", "--mode", "chat", "--archive", db, "--no-live"), "unknown mode"
    )
    assert_user_error(invoke("discover", "--budget", "-1", "--archive", db, "--no-live"), "budget")
    assert_user_error(
        invoke("leaderboard", "--suite", "atari", "--archive", archive_path), "unknown suite"
    )
    assert_user_error(
        invoke("leaderboard", "--task", "value", "--archive", archive_path), "unknown task"
    )
    assert_user_error(
        invoke("leaderboard", "--run", "r1", "--all", "--archive", archive_path), "either --run"
    )
    assert_user_error(
        invoke("export", "r1", "--format", "xml", "--archive", archive_path), "unknown format"
    )
    assert_user_error(
        invoke("export", "r1", "-o", str(tmp_path / "no" / "x.json"), "--archive", archive_path),
        "does not exist",
    )
    assert not (tmp_path / "new.db").exists() or Archive(db).runs() == []  # nothing was started


def test_bad_archive_files(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 200)
    assert_user_error(invoke("runs", "--archive", str(junk)), "not a usable SQLite archive")
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    assert_user_error(invoke("leaderboard", "--archive", str(other)), "not a metarl archive")
    assert_user_error(invoke("runs", "--archive", str(tmp_path)), "is a directory")
    assert_user_error(
        invoke("discover", "--archive", str(tmp_path / "no" / "x.db"), "--no-live"),
        "does not exist",
    )
    empty = tmp_path / "empty.db"
    Archive(empty).close()
    assert_user_error(invoke("leaderboard", "--archive", str(empty)), "no runs")


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("budget = [1, 2", "not valid TOML"),
        ("bugdet = 3", "unknown option 'bugdet'"),
        ("budget = 'many'", "must be an integer"),
        ("confirm = 1", "must be true or false"),
        ("suite = 'atari'", "unknown suite"),
        ("[discover]\nworkers = 0", "workers must be at least 1"),
        ("discover = 3", "[discover] must be a table"),
    ],
)
def test_malformed_config(tmp_path, content, fragment):
    config = tmp_path / "discover.toml"
    config.write_text(content)
    result = invoke(
        "discover", "--config", str(config), "--archive", str(tmp_path / "x.db"), "--no-live"
    )
    assert_user_error(result, fragment)


def test_missing_config_and_bad_duration(tmp_path):
    assert_user_error(
        invoke(
            "discover",
            "--config",
            str(tmp_path / "none.toml"),
            "--no-live",
            "--archive",
            str(tmp_path / "x.db"),
        ),
        "does not exist",
    )
    result = invoke(
        "discover", "--max-time", "soon", "--archive", str(tmp_path / "x.db"), "--no-live"
    )
    assert (
        result.exit_code != 0 and "Traceback" not in result.output and "duration" in result.output
    )


def test_config_file_supplies_defaults(tmp_path):
    from metarl.cli.discover import _collect

    config = tmp_path / "discover.toml"
    config.write_text('suite = "smoke"\nbudget = 7\n[discover]\nmax-time = 60\nmodel = "a/b"\n')
    resolved = _collect(config, {"budget": 3, "seeds": None})
    assert (resolved.suite, resolved.budget, resolved.max_time, resolved.models) == (
        "smoke",
        3,
        60.0,
        ["a/b"],
    )
    assert resolved.confirm_seeds == 2 * resolved.seeds


def test_resume_refuses_changed_settings(archive_path):
    assert_user_error(
        invoke("discover", "--resume", "r1", "--task", "optimizer", "--archive", archive_path),
        "cannot change on resume",
    )


def test_resume_with_config_file_is_refused(archive_path, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("budget = 3\n")
    assert_user_error(
        invoke("discover", "--resume", "r1", "--config", str(config), "--archive", archive_path),
        "cannot be combined",
    )


# -- the search's RNG seed is `--rng-seed` / `rng_seed`; `seed` is an older name ------------------

SEED_OPTION = re.compile(r"--seed(?![\w-])")  # `--seed` itself, not `--seeds` or `--seed-values`


@pytest.mark.parametrize("command", ["discover", "es", "distil", "symbolic", "train-proposer"])
def test_rng_seed_option_replaces_seed(command):
    result = invoke(command, "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--rng-seed" in result.stdout
    assert not SEED_OPTION.search(result.stdout), result.stdout


def test_seed_is_not_an_alias_of_rng_seed(tmp_path):
    result = invoke("discover", "--seed", "1", "--archive", str(tmp_path / "x.db"), "--no-live")
    assert result.exit_code == 2 and "No such option" in result.output


def test_old_seed_key_loads_as_rng_seed(tmp_path):
    from metarl.cli.discover import _collect
    from metarl.discovery.config import DiscoverConfig

    assert DiscoverConfig.from_dict({"seed": 3}).rng_seed == 3
    assert DiscoverConfig.from_dict({"seed": 3, "rng_seed": 5}).rng_seed == 5  # the new name wins
    assert "seed" not in DiscoverConfig().to_dict()
    config = tmp_path / "old.toml"
    config.write_text('suite = "smoke"\nseed = 3\n')
    assert _collect(config, {}).rng_seed == 3
    config.write_text("seed = 3\n[discover]\nrng-seed = 4\n")
    assert _collect(config, {}).rng_seed == 4
    assert _collect(config, {"rng_seed": 6}).rng_seed == 6  # the command line over the file


def test_resume_of_an_archived_config_with_the_old_seed_key(tmp_path):
    """A run archived by an older metarl (`"seed": 3` in its config) resumes with rng_seed 3,
    and `--rng-seed` on resume is checked against it."""
    from metarl.cli.discover import _resume_config

    path = str(tmp_path / "old.db")
    stored = {"task": "drift", "suite": "smoke", "seeds": 1, "timesteps": 8192, "seed": 3}
    with Archive(path) as archive:
        archive.create_run(task="drift", suite="smoke", config=stored, state={"version": 1})
    assert _resume_config(path, "r1", {"budget": 4}, {}).rng_seed == 3
    assert _resume_config(path, "r1", {}, {"rng_seed": 3}).rng_seed == 3
    assert_user_error(
        invoke("discover", "--resume", "r1", "--rng-seed", "4", "--archive", path, "--no-live"),
        "rng_seed",
        "cannot change on resume",
    )
