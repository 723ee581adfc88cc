"""`metarl evaluate`: the cascade from the command line, its output and its exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import invoke

from metarl.tasks import get_task

CORPUS = Path(__file__).parent / "bad_candidates"
TINY = [
    "--suite",
    "smoke",
    "--seeds",
    "1",
    "--seed-values",
    "0",
    "--timesteps",
    "4096",
    "--short-timesteps",
    "4096",
    "--probe-seed",
    "0",
]


@pytest.fixture(scope="module", autouse=True)
def cache_dir(metarl_cache):
    return metarl_cache


pytestmark = pytest.mark.usefixtures("restore_logging")


def test_passing_seed_prints_a_table_and_exits_0():
    path = str(get_task("drift").seed_program("ppo_clip").path)
    result = invoke("evaluate", path, "--task", "drift", *TINY)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "CartPole-v1" in out and "PASSED" in out and "train 1.000" in out
    for column in ("return", "normalised", "compile s", "run s", "env-steps/s"):
        assert column in out


def test_passing_seed_as_json():
    path = str(get_task("optimizer").seed_program("adam").path)
    result = invoke("evaluate", path, "--task", "optimizer", "--json", *TINY)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # stdout is exactly one JSON object
    assert data["passed"] is True and data["stage"] == "full" and data["reason"] is None
    assert data["fitness"] == 1.0
    (env,) = data["env_scores"]
    assert env["env"] == "CartPole-v1" and env["normalised"] == 1.0
    for key in (
        "mean",
        "std",
        "compile_s",
        "run_s",
        "steps_per_s",
        "returns",
        "baseline_mean",
        "random_mean",
    ):
        assert key in env


def test_static_failure_exits_1_with_the_reason():
    result = invoke("evaluate", str(CORPUS / "import_os.py"), "--task", "drift", *TINY)
    assert result.exit_code == 1
    assert "FAILED at stage static" in result.stdout
    assert "import of `os` is not allowed" in result.stdout


def test_probe_failure_as_json_exits_1():
    result = invoke("evaluate", str(CORPUS / "wrong_shape.py"), "--task", "drift", "--json", *TINY)
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["passed"] is False and data["stage"] == "probes"
    assert "has shape (64, 64)" in data["reason"]


def test_candidate_prints_stay_out_of_the_json(tmp_path):
    path = tmp_path / "noisy.py"
    path.write_text(
        "def drift(ratio, advantage, epsilon):\n"
        "    print('{\"passed\": true}')\n"
        "    return ratio[:, None]\n"
    )
    result = invoke("evaluate", str(path), "--task", "drift", "--json", *TINY)
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["passed"] is False and '{"passed": true}' in data["stdout"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["evaluate", "does/not/exist.py", "--task", "drift"], "no such file: does/not/exist.py"),
        (
            ["evaluate", "{seed}", "--task", "critic"],
            "unknown task 'critic'; choose one of: drift, optimizer, value_loss",
        ),
        (["evaluate", "{seed}", "--task", "drift", "--suite", "atari"], "unknown suite 'atari'"),
        (["evaluate", "{seed}", "--task", "drift", "--seeds", "0"], "--seeds must be at least 1"),
        (["evaluate", "{dir}", "--task", "drift"], "not a file"),
        (
            ["evaluate", "{seed}", "--task", "drift", "--seed-values", "0,x"],
            "--seed-values: seed values must be integers",
        ),
        (
            ["evaluate", "{seed}", "--task", "drift", "--seed-values", "3,3"],
            "--seed-values: seed values must be distinct",
        ),
        (
            ["evaluate", "{seed}", "--task", "drift", "--seeds", "2", "--seed-values", "5"],
            "--seeds 2 but 1 --seed-values",
        ),
        (
            ["evaluate", "{seed}", "--task", "drift", "--suite", "classic", "--envs", "Pong"],
            "unknown environment 'Pong' for suite 'classic' (its envs, training: CartPole-v1",
        ),
        (["evaluate", "{seed}", "--task", "drift", "--envs", " , "], "--envs needs at least one"),
    ],
)
def test_usage_errors_exit_2_with_one_line_and_no_traceback(args, message):
    seed = str(get_task("drift").seed_program("ppo_clip").path)
    args = [a.replace("{seed}", seed).replace("{dir}", str(CORPUS)) for a in args]
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("metarl evaluate: error: ")
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_missing_task_option_is_a_usage_error():
    result = invoke("evaluate", str(CORPUS / "import_os.py"))
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "metarl evaluate: error: --task: which contract the files implement "
        "(drift, optimizer, value_loss, lpg)"
    )


def test_bad_option_value_is_one_usage_line():
    result = invoke("evaluate", str(CORPUS / "import_os.py"), "--task", "drift", "--seeds", "x")
    assert result.exit_code == 2
    assert result.stderr.startswith("metarl evaluate: error: Invalid value for '--seeds'")
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.output


def test_verbose_shows_info_records_on_stderr():
    args = ["evaluate", str(CORPUS / "import_os.py"), "--task", "drift", *TINY]
    quiet = invoke(*args)
    loud = invoke(*args, "--verbose")
    for result in (quiet, loud):
        assert result.exit_code == 1 and "FAILED at stage static" in result.stdout
    assert "INFO" not in quiet.stderr
    info = [line for line in loud.stderr.splitlines() if line.startswith("INFO metarl.")]
    assert any("evaluating" in line and "import_os.py" in line for line in info), loud.stderr
    assert any("failed at stage static" in line for line in info), loud.stderr
    assert "INFO" not in loud.stdout  # the records go to stderr, never into the output


def test_envs_scores_only_the_listed_environments_of_the_suite():
    """--envs picks the suite's environments by name (one game compared across harnesses):
    classic has CartPole-v1 and Acrobot-v1 to train on, validation and test envs besides."""
    path = str(get_task("drift").seed_program("ppo_clip").path)
    tiny = [a if a != "smoke" else "classic" for a in TINY]
    result = invoke("evaluate", path, "--task", "drift", "--json", "--envs", "CartPole-v1", *tiny)
    assert result.exit_code == 0, result.output
    scored = {row["env"] for row in json.loads(result.stdout)["env_scores"]}
    assert scored == {"CartPole-v1"}


def test_envs_without_a_training_env_re_measure_those_alone():
    """Only validation or test envs listed: they are scored on fresh seeds and nothing is
    trained on the training envs (benchmarks/at_scale.py re-measures the test games so)."""
    path = str(get_task("drift").seed_program("ppo_clip").path)
    tiny = [a if a != "smoke" else "classic" for a in TINY]
    result = invoke("evaluate", path, "--task", "drift", "--json", "--envs", "Catch-bsuite", *tiny)
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)
    assert [(row["env"], row["role"]) for row in outcome["env_scores"]] == [
        ("Catch-bsuite", "validation")
    ]
    assert outcome["fitness"] is None and outcome["validation"] == 1.0
