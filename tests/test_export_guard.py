"""`metarl export --format discogen` is guarded as an evaluation is: DiscoGen's `run_main.py`
imports the exported module in a plain process, so a candidate metarl's static check refuses
(a file, or an LLM proposal archived with its refusal) is not exported unless
`--unsafe-export-refused` asks for it, and the next step printed is metarl's sandboxed harness.

The refusals happen before DiscoGen's runtime is looked up, so they are tested on any machine
(a `--discogen-python` that does not exist shows the runtime was never reached); the successful
exports need a DiscoGen runtime and skip without one, as tests/test_discogen.py's do.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import invoke
from test_discogen import discogen_python, needs_runtime

from metarl.archives import Archive
from metarl.cli.discogen import defined_task, sandboxed_command
from metarl.discogen.guard import RefusedExport, check_exportable
from metarl.discogen.harness import DiscoGenHarness
from metarl.discogen.runtime import Runtime
from metarl.discogen.task import TaskManifest, export_task
from metarl.evaluation.outcome import Outcome
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash

PPO_CLIP = get_task("drift").seed_program("ppo_clip")
ADAM = get_task("optimizer").seed_program("adam").source
NO_PYTHON = "/nonexistent/discogen/python"  # a runtime that, if looked up, fails loudly
NEVER_STARTED = Runtime(NO_PYTHON, "1.3.0", "3.12.1", ())

pytestmark = pytest.mark.usefixtures("restore_logging")


def hostile_drift(marker: Path) -> str:
    """A drift whose module-level code writes `marker` when imported (as run_main.py would),
    with an escape sequence the refusal's reason quotes."""
    return (
        "import os\n"
        f"open({str(marker)!r}, 'w').write('ran on the host')\n"
        "BANNER = os.getcwd()\n"
        "def drift(ratio, advantage, epsilon):\n"
        "    return (ratio - 1.0) ** 2\n"
    )


def escaping_drift() -> str:
    """A drift whose refused top-level line carries a terminal escape (clear screen, green)."""
    return (
        "def drift(ratio, advantage, epsilon):\n"
        "    return (ratio - 1.0) ** 2\n"
        "print('\x1b[2J\x1b[32mPASSED fitness 999')\n"
    )


def archive_refused(path: Path, code: str) -> str:
    """An archive holding one LLM proposal the static check refused, archived as the loop
    archives one (its code, stage "static" and the reason); its candidate id."""
    reason = get_reason(code)
    with Archive(path) as store:
        run = store.create_run(task="drift", suite="smoke", proposer="llm")
        row = {
            "id": f"{run}-5",
            "run_id": run,
            "seq": 5,
            "task": "drift",
            "suite": "smoke",
            "hash": source_hash(code),
            "code": code,
            "name": "helpful_drift",
            "thought": "a drift that also sets up its workspace",
            "parent_ids": [],
            "generation": 1,
            "island": 0,
            "is_seed": 0,
            "proposer": "llm",
            "operator": "llm",
            "seeds": [0, 1],
            "total_timesteps": 8192,
            "eval_key": "k",
            "versions": {"jax": "0.9.2"},
            "device": "cpu",
        }
        store.record_candidate(row, Outcome.failure("static", reason))
    return row["id"]


def get_reason(code: str) -> str:
    """The static check's reason for refusing `code` as a drift."""
    from metarl.evaluation.static_check import check_task_source

    report = check_task_source(code, get_task("drift"))
    assert not report.ok
    return report.reason


def assert_one_line_error(result, code: int) -> str:
    """The result is exit `code` with exactly one line on stderr and no traceback; that line."""
    assert result.exit_code == code, result.output
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit), result.exception
    return result.stderr.strip()


# --- refused candidates are not exported --------------------------------------------------------
def test_an_archived_refused_proposal_is_not_exported_and_nothing_is_written(tmp_path):
    marker = tmp_path / "marker"
    candidate_id = archive_refused(tmp_path / "metarl.db", hostile_drift(marker))
    out = tmp_path / "task"
    result = invoke(
        *("export", candidate_id, "--format", "discogen", "-o", str(out)),
        *("--archive", str(tmp_path / "metarl.db"), "--discogen-python", NO_PYTHON),
    )
    line = assert_one_line_error(result, 1)
    assert f"{candidate_id} was refused by the static check (line 1: import of `os`" in line
    assert "; not exported" in line
    assert not out.exists() and not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metarl.db"]  # no staging folder


def test_a_refused_candidate_file_is_not_exported_and_its_task_is_inferred(tmp_path):
    """No --task: the file defines `drift`, so it is checked (and refused) as a drift."""
    marker = tmp_path / "marker"
    candidate = tmp_path / "helpful_drift.py"
    candidate.write_text(hostile_drift(marker))
    out = tmp_path / "task"
    result = invoke(
        *("export", str(candidate), "-f", "discogen", "-o", str(out)),
        *("--discogen-python", NO_PYTHON),
    )
    line = assert_one_line_error(result, 1)
    assert f"{candidate} was refused by the static check (line 1: import of `os`" in line
    assert not out.exists() and not marker.exists()


def test_the_refusal_shows_the_candidates_text_inert(tmp_path):
    candidate = tmp_path / "banner.py"
    candidate.write_text(escaping_drift())
    out = tmp_path / "task"
    result = invoke(
        *("export", str(candidate), "-t", "drift", "-f", "discogen", "-o", str(out)),
        *("--discogen-python", NO_PYTHON),
    )
    line = assert_one_line_error(result, 1)
    assert "\x1b" not in result.output and "\\x1b[2J" in line
    assert "top-level statement" in line and not out.exists()


def test_export_task_refuses_before_the_runtime_or_the_destination_is_touched(tmp_path):
    """The lowest layer is guarded: any caller of export_task gets the refusal (a MetarlError
    with one line), and the never-started runtime is never run."""
    out = tmp_path / "task"
    with pytest.raises(RefusedExport, match=r"^r9-1 was refused by the static check \(line 1"):
        export_task(
            hostile_drift(tmp_path / "marker"), "drift", out, NEVER_STARTED, candidate_id="r9-1"
        )
    assert list(tmp_path.iterdir()) == []


def test_the_sandboxed_harness_still_reports_a_refusal_as_an_outcome():
    outcome = DiscoGenHarness(NEVER_STARTED).evaluate(escaping_drift(), "drift")
    assert not outcome.passed and outcome.stage == "static"
    assert outcome.reason.startswith("static check: line 3: top-level statement")


# --- the loudly named override -------------------------------------------------------------------
def test_the_override_belongs_to_the_discogen_format(tmp_path):
    result = invoke("export", "r1", "--format", "csv", "--unsafe-export-refused")
    line = assert_one_line_error(result, 2)
    assert "--unsafe-export-refused are options of --format discogen" in line


def test_the_override_lets_a_refused_file_past_the_guard(tmp_path):
    """With the override the refusal is not the error: the export goes on to DiscoGen's runtime
    (which does not exist here)."""
    candidate = tmp_path / "helpful_drift.py"
    candidate.write_text(hostile_drift(tmp_path / "marker"))
    result = invoke(
        *("export", str(candidate), "-f", "discogen", "-o", str(tmp_path / "task")),
        *("--discogen-python", NO_PYTHON, "--unsafe-export-refused"),
    )
    line = assert_one_line_error(result, 2)
    assert "refused" not in line and NO_PYTHON in line
    assert not (tmp_path / "task").exists() and not (tmp_path / "marker").exists()


def test_the_override_returns_the_reason_for_the_warning():
    reason = check_exportable(escaping_drift(), "drift", unsafe=True)
    assert reason is not None and reason.startswith("line 3: top-level statement")
    assert "\x1b" not in reason


# --- honest candidates pass -----------------------------------------------------------------
def test_the_honest_seed_programs_pass_the_guard():
    assert check_exportable(PPO_CLIP.source, "drift") is None
    assert check_exportable(ADAM, "optimizer") is None
    assert check_exportable(None, "drift") is None  # DiscoGen's own base module


def test_an_honest_file_without_task_goes_on_to_the_runtime(tmp_path):
    """The seed's task is inferred (no '--task drift or --task optimizer' error) and it passes
    the guard; what stops it here is the missing runtime."""
    result = invoke(
        *("export", str(PPO_CLIP.path), "-f", "discogen", "-o", str(tmp_path / "task")),
        *("--discogen-python", NO_PYTHON),
    )
    line = assert_one_line_error(result, 2)
    assert "--task" not in line and "refused" not in line and NO_PYTHON in line


# --- the task of a file, read from its syntax ----------------------------------------------------
@pytest.mark.parametrize(
    "source, expected",
    [
        ("def drift(ratio, advantage, epsilon):\n    return ratio\n", "drift"),
        ("def helper(x):\n    return x\n\ndef drift(r, a, e):\n    return helper(r)\n", "drift"),
        (ADAM, "optimizer"),
        ("def drift(r, a, e):\n    return r\n\ndef optimizer(*args):\n    return 0\n", None),
        ("def helper(x):\n    return x\n", None),
        ("class C:\n    def drift(self, r, a, e):\n        return r\n", None),
        ("drift = lambda r, a, e: r\n", None),
        ("def drift(r, a, e:\n", None),
        ("", None),
    ],
)
def test_the_task_of_a_file_is_the_one_task_function_it_defines(source, expected):
    assert defined_task(source) == expected


def test_inferring_a_task_never_executes_the_file(tmp_path):
    marker = tmp_path / "marker"
    assert defined_task(hostile_drift(marker)) == "drift"
    assert not marker.exists()


def test_a_file_defining_no_task_function_still_needs_task(tmp_path):
    candidate = tmp_path / "helper.py"
    candidate.write_text("def helper(x):\n    return x\n")
    result = invoke("export", str(candidate), "-f", "discogen", "-o", str(tmp_path / "t"))
    line = assert_one_line_error(result, 2)
    assert "--task drift or --task optimizer" in line


# --- the next step is the sandboxed harness --------------------------------------------------
def test_the_next_step_is_metarls_sandboxed_harness_with_the_export_options():
    command = sandboxed_command(
        "my drift.py", "drift", True, ["Breakout-MinAtar"], ["TOTAL_TIMESTEPS=100000"], None, None
    )
    assert command == (
        "metarl evaluate 'my drift.py' --harness discogen --task drift --test "
        "--envs Breakout-MinAtar --set TOTAL_TIMESTEPS=100000"
    )
    archived = sandboxed_command("r3-12", None, False, None, None, None, "runs/a.db")
    assert archived == "metarl evaluate r3-12 --harness discogen --archive runs/a.db"
    assert "run_main.py" not in command + archived


def test_export_help_names_the_sandboxed_next_step():
    result = invoke("export", "--help")
    assert result.exit_code == 0
    assert "# then: metarl evaluate r3-12 --harness discogen" in result.stdout
    assert "then: python run_main.py" not in result.stdout
    assert "--unsafe-export-refused" in result.stdout


# --- with a DiscoGen runtime (slow) ---------------------------------------------------------
# the runtime's lookup and skip marker: tests/test_discogen.py's


@pytest.mark.harness
@needs_runtime
def test_an_honest_export_prints_the_sandboxed_command(tmp_path):
    out = tmp_path / "task"
    result = invoke(
        *("export", str(PPO_CLIP.path), "-f", "discogen", "-o", str(out)),
        *("--discogen-python", discogen_python(), "--set", "TOTAL_TIMESTEPS=4096"),
    )
    assert result.exit_code == 0, result.output
    assert f"metarl evaluate {PPO_CLIP.path} --harness discogen --task drift" in result.stdout
    assert "--set TOTAL_TIMESTEPS=4096" in result.stdout
    assert "run_main.py" not in result.stdout
    assert TaskManifest.read(out).refused is None


@pytest.mark.harness
@needs_runtime
def test_the_override_exports_a_refused_candidate_with_a_warning(tmp_path):
    marker = tmp_path / "marker"
    candidate_id = archive_refused(tmp_path / "metarl.db", hostile_drift(marker))
    out = tmp_path / "task"
    result = invoke(
        *("export", candidate_id, "-f", "discogen", "-o", str(out), "--unsafe-export-refused"),
        *("--archive", str(tmp_path / "metarl.db"), "--discogen-python", discogen_python()),
    )
    assert result.exit_code == 0, result.output
    assert f"warning: {candidate_id} was refused by the static check" in result.stderr
    assert "only inside a sandbox" in result.stderr
    manifest = TaskManifest.read(out)
    assert manifest.refused.startswith("line 1: import of `os`")
    assert "import os" in (out / "discovered" / "loss.py").read_text()
    assert not marker.exists()  # exported, never imported
