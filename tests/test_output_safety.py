"""Text of model or candidate origin never acts on the terminal, and credentials never leave the
request that needs them.

A thought, name, reason, code comment, prompt, reply or LLM error may hold ANSI CSI and OSC
sequences (clear the screen, a green PASSED, a window title, a hyperlink), a bare carriage
return, backspaces, C1 controls, bidi overrides and rich markup. Every command that prints such
text (show, leaderboard, lineage, runs, export, the discovery and method progress lines,
evaluate's verdict, error lines, the log) prints it inert: no raw control byte, the markup as
literal text, the escapes visible (`\\x1b`). A password or key in `--api-base` is used for the
request and appears nowhere else: not in the archive file, the report, the log, or the output.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import invoke
from llm_server import Reply, ScriptedLLMServer

from metarl.archives import Archive
from metarl.cli import grpo as grpo_cli
from metarl.cli import methods as methods_cli
from metarl.cli.console import console
from metarl.cli.discover import _resume_config
from metarl.cli.errors import UserError, error_line
from metarl.cli.options import run_options
from metarl.cli.progress import Display
from metarl.cli.verdict import print_outcome
from metarl.discovery.config import ConfigError, DiscoverConfig
from metarl.discovery.proposers.llm.client import LLMClient, redact
from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.evaluation.settings import CascadeSettings
from metarl.evaluation.text import (
    clean,
    has_redactions,
    printable,
    redact_config,
    redact_secrets,
    redact_url,
    url_secrets,
)
from metarl.logs import log_to_file, scrub_records_with
from metarl.report.story import header_of

pytestmark = pytest.mark.usefixtures("restore_logging")

# what a terminal acts on: C0 controls but newline and tab, DEL, C1 (0x9b: 8-bit CSI), bidi
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE = (
    "\x1b[2J\x1b[H\x1b[32mPASSED\x1b[0m \x1b]0;pwned\x07 "
    "\x1b]8;;http://evil.invalid\x1b\\click\x1b]8;;\x1b\\ \rfitness 999\x08\x08 \x9b31m \u202eevil"
)
MARKUP = "[bold green]PASSED[/] [link=http://evil.invalid]x[/link]"
NAME = "ev[b]n[/b]\x1b[31m"

PASSWORD = "hunter2-canary"
KEY = "canary-key-42"


def assert_inert(text: str) -> None:
    """No byte a terminal acts on; the hostile text's markup literal, its escapes visible."""
    found = CONTROL.findall(text)
    assert not found, f"raw control characters in the output: {found[:10]!r}"


# -- the sanitiser and the redaction, as tables ----------------------------------------------


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("plain text\nwith\ttabs", "plain text\nwith\ttabs"),
        ("\x1b[2Jclear", "\\x1b[2Jclear"),
        ("\x1b[32mPASSED\x1b[0m", "\\x1b[32mPASSED\\x1b[0m"),
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
        ("\x1b]8;;http://e\x1b\\x\x1b]8;;\x1b\\", "\\x1b]8;;http://e\\x1b\\x\\x1b]8;;\\x1b\\"),
        ("ok\rFAILED", "ok\\x0dFAILED"),
        ("line\r\nnext", "line\nnext"),
        ("ab\x08\x08", "ab\\x08\\x08"),
        ("\x9b31m\x7f\x00", "\\x9b31m\\x7f\\x00"),
        ("abc\u202edef\u2066", "abc\\u202edef\\u2066"),
        ("[bold green]PASSED[/]", "[bold green]PASSED[/]"),
        (None, ""),
        (42, "42"),
    ],
)
def test_printable_shows_every_control_character_as_a_visible_escape(raw, shown):
    assert printable(raw) == shown
    assert_inert(printable(raw))


def test_clean_shows_escapes_redacts_secrets_and_truncates():
    cleaned = clean("\x1b[31mred\x07 token sk-live-0123456789", secrets=["sk-live-0123456789"])
    assert cleaned == "\\x1b[31mred\\x07 token [redacted]"
    assert clean(None) is None
    assert len(clean("x" * 10_000, limit=500)) <= 500


@pytest.mark.parametrize(
    "url, redacted",
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        (f"http://alice:{PASSWORD}@127.0.0.1:8000/v1", "http://***@127.0.0.1:8000/v1"),
        ("https://ghp_token123@github.com/x.git", "https://***@github.com/x.git"),
        ("http://alice:p@ss@host/v1", "http://***@host/v1"),
        (f"http://h/v1?api_key={KEY}&model=x", "http://h/v1?api_key=***&model=x"),
        ("http://h/?key=a1&apikey=b2&token=c3", "http://h/?key=***&apikey=***&token=***"),
        ("http://h/?access_token=a&password=b", "http://h/?access_token=***&password=***"),
        ("http://h/?secret=a&sig=b&x=1", "http://h/?secret=***&sig=***&x=1"),
        ("https://s3/o?X-Amz-Signature=abc&v=2", "https://s3/o?X-Amz-Signature=***&v=2"),
        ("http://h/cb#access_token=abc&state=s", "http://h/cb#access_token=***&state=s"),
        ("http://h/?key=", "http://h/?key="),
        ("not a url", "not a url"),
    ],
)
def test_redact_url_hides_userinfo_and_secret_parameters(url, redacted):
    assert redact_url(url) == redacted


@pytest.mark.parametrize(
    "text, redacted",
    [
        (
            f"Connection error to http://alice:{PASSWORD}@127.0.0.1:9/v1?api_key={KEY}.",
            "Connection error to http://***@127.0.0.1:9/v1?api_key=***.",
        ),
        (
            f"DiscoverConfig(api_base='http://u:{PASSWORD}@h/v1', rng_seed=0)",
            "DiscoverConfig(api_base='http://***@h/v1', rng_seed=0)",
        ),
        ('{"api_base": "http://u:pw@h/v1"}', '{"api_base": "http://***@h/v1"}'),
        # code's keyword arguments are not URL parameters
        ("sorted(x, key=len); f(token=t)", "sorted(x, key=len); f(token=t)"),
    ],
)
def test_redact_secrets_redacts_every_url_in_a_text(text, redacted):
    assert redact_secrets(text) == redacted


def test_redact_secrets_removes_the_given_values_anywhere():
    text = f"auth {PASSWORD} failed for alice (key {KEY}); id ab"
    assert redact_secrets(text, [PASSWORD, KEY, "ab", None]) == (
        "auth *** failed for alice (key ***); id ab"  # "ab": too short to hunt for
    )


def test_url_secrets_lists_the_credentials_also_percent_decoded():
    secrets = url_secrets(f"http://alice:hunter%32-x@h/v1?api_key={KEY}&model=gpt")
    assert set(secrets) == {"alice:hunter%32-x", "alice:hunter2-x", "hunter%32-x", "hunter2-x"} | {
        "alice",
        KEY,
    }
    assert url_secrets("http://h/v1") == [] and url_secrets(None) == []


def test_redact_config_keeps_the_shape_and_hides_credentials():
    config = {
        "api_base": f"http://alice:{PASSWORD}@h/v1?api_key={KEY}",
        "models": ["openai/x", f"http://t:{PASSWORD}@h"],
        "api_key": "plain-key-value",
        "max_completion_tokens": 512,
        "nested": {"password": "p4ssw0rd", "note": "fine"},
        "seeds": None,
    }
    archived = redact_config(config)
    assert archived == {
        "api_base": "http://***@h/v1?api_key=***",
        "models": ["openai/x", "http://***@h"],
        "api_key": "***",
        "max_completion_tokens": 512,
        "nested": {"password": "***", "note": "fine"},
        "seeds": None,
    }
    assert PASSWORD in config["api_base"]  # the input is not changed
    assert has_redactions(archived) and not has_redactions({"api_base": "http://h/v1"})


def test_a_configs_hash_is_that_of_its_archived_form():
    plain = DiscoverConfig(api_base="http://h/v1")
    secret = DiscoverConfig(api_base=f"http://alice:{PASSWORD}@h/v1")
    archived = DiscoverConfig(api_base="http://***@h/v1")
    assert secret.hash() == archived.hash() != plain.hash()


def test_error_lines_show_quoted_candidate_text_inert():
    line = error_line(f"the teacher could not be sampled ({HOSTILE} {MARKUP})", "distil")
    assert_inert(line)
    assert line.startswith("metarl distil: error: ") and MARKUP in line


# -- the archive and the report never hold credentials ------------------------------------


def test_the_archive_stores_run_configs_and_errors_without_credentials(tmp_path):
    url = f"http://alice:{PASSWORD}@127.0.0.1:8000/v1?api_key={KEY}"
    with Archive(tmp_path / "a.db") as store:
        run = store.create_run(task="drift", suite="smoke", config={"api_base": url, "rng_seed": 0})
        store.update_run(run, config={"api_base": url, "budget": 3}, error=f"failed at {url}")
        store.record_candidate(
            {"id": f"{run}-0", "run_id": run, "seq": 0, "task": "drift", "suite": "smoke"},
            Outcome.failure("static", "no program"),
            calls=[{"model": "openai/x", "prompt": [], "error": f"APIError: {url} refused"}],
        )
        store.finish_run(run, "failed", f"the LLM at {url} refused")
        stored = store.get_run(run)
        call = store.calls(f"{run}-0")[0]
    assert stored["config"] == {"api_base": "http://***@127.0.0.1:8000/v1?api_key=***", "budget": 3}
    assert stored["error"] == "failed at http://***@127.0.0.1:8000/v1?api_key=***"
    assert "***" in stored["stop_reason"] and "***" in call["error"]
    for path in tmp_path.iterdir():  # the database, its WAL and shared memory
        data = path.read_bytes()
        assert PASSWORD.encode() not in data and KEY.encode() not in data, path.name


def test_a_resumed_run_takes_its_credentials_again_from_the_command_line(tmp_path):
    url = f"http://alice:{PASSWORD}@127.0.0.1:8000/v1"
    config = DiscoverConfig(proposer="llm", models=["openai/x"], api_base=url).resolved()
    with Archive(tmp_path / "a.db") as store:
        store.create_run(task="drift", suite="smoke", config=config.to_dict())
        store.create_run(task="drift", suite="smoke", config={"vllm_server_url": url, "steps": 3})
    archive = str(tmp_path / "a.db")
    assert _resume_config(archive, "r1", {"api_base": url}, {}).api_base == url
    with pytest.raises(ConfigError, match="give --api-base again"):
        _resume_config(archive, "r1", {"api_base": None}, {})
    fields = {"vllm_server_url", "steps"}
    values = run_options(archive, "r2", {"vllm_server_url": url}, {}, fields)
    assert values == {"vllm_server_url": url, "steps": 3}
    with pytest.raises(UserError, match="credentials are never archived"):
        run_options(archive, "r2", {"vllm_server_url": None}, {}, fields)
    with pytest.raises(UserError, match="cannot change on resume"):
        run_options(archive, "r2", {"vllm_server_url": "http://other/v1"}, {}, fields)


def test_the_reports_header_redacts_an_older_archives_run_options():
    url = f"http://alice:{PASSWORD}@h/v1?api_key={KEY}"
    header = header_of({"id": "r1", "config": {"api_base": url}, "stop_reason": f"at {url}"}, None)
    assert header.config == {"api_base": "http://***@h/v1?api_key=***"}
    assert PASSWORD not in header.stop_reason and KEY not in header.stop_reason


def test_the_log_scrubs_every_record_and_traceback(tmp_path):
    scrub_records_with(printable)
    url = f"http://alice:{PASSWORD}@h/v1?api_key={KEY}"
    logger = logging.getLogger("metarl.test_output_safety")
    with log_to_file(tmp_path / "run.log") as path:
        logger.warning("config %s, reason %s", DiscoverConfig(api_base=url), HOSTILE)
        try:
            raise RuntimeError(f"cannot reach {url}: {HOSTILE}")
        except RuntimeError:
            logger.exception("the call failed")
    text = path.read_text()
    assert "http://***@h/v1?api_key=***" in text and "Traceback" in text
    assert PASSWORD not in text and KEY not in text
    assert_inert(text)
    assert "\\x1b[2J" in text


# -- the LLM client: the real URL for the request, a redacted one in every error -------------


def test_the_client_sends_the_credentials_and_redacts_them_from_error_texts(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedLLMServer([]) as server:
        url = f"http://alice:{PASSWORD}@127.0.0.1:{server.port}/v1"
        echoed = f"{url}?api_key={KEY} (user alice:{PASSWORD}, password {PASSWORD})"
        server.push(Reply(status=400, text=f"rejected {echoed}"), "a reply")
        client = LLMClient(["openai/scripted"], api_base=url, max_retries=0, timeout_s=20)
        failed = client.chat([{"role": "user", "content": "hi"}])
        answered = client.chat([{"role": "user", "content": "hi"}])
    assert failed.error and "rejected http://***@127.0.0.1" in failed.error
    assert PASSWORD not in failed.error and KEY not in failed.error
    assert answered.error is None and answered.reply == "a reply"
    # the request itself carried them (HTTP basic authentication from the URL's userinfo)
    assert server.authorizations[0] and server.authorizations[0].startswith("Basic ")


def test_a_connection_error_names_no_credential(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1?api_key={KEY}"
    call = LLMClient(["openai/x"], api_base=url, max_retries=0, timeout_s=5).chat(
        [{"role": "user", "content": "hi"}]
    )
    assert call.error and PASSWORD not in call.error and KEY not in call.error


def test_redact_removes_the_requests_own_secrets():
    text = f"401 for key sk-no-key-needed at http://u:{PASSWORD}@h ({PASSWORD})"
    assert redact(text, ["sk-no-key-needed", PASSWORD]) == "401 for key *** at http://***@h (***)"


# -- every command prints archived model and candidate text inert ----------------------------


def _scores(fitness: float) -> list[EnvScore]:
    return [EnvScore("CartPole-v1", [0], 8192, [200.0], 200.0, 0.0, fitness, 150.0, 20.0)]


@pytest.fixture
def hostile_archive(tmp_path) -> Path:
    """A run whose candidates' every model- or candidate-made field is hostile."""
    path = tmp_path / "hostile.db"
    text = f"{HOSTILE}\n{MARKUP}"
    with Archive(path) as store:
        run = store.create_run(
            task="drift", suite="smoke", proposer="llm:[red]m[/red]\x1b]0;t\x07", config={}
        )
        base = {"run_id": run, "task": "drift", "suite": "smoke", "seeds": [0]}
        store.record_candidate(
            {
                **base,
                "id": f"{run}-0",
                "seq": 0,
                "hash": "h0",
                "name": NAME,
                "thought": text,
                "code": f"def drift(ratio, advantage, epsilon):\n    # {HOSTILE}\n    return 1\n",
                "proposer": "llm:[red]m[/red]",
                "operator": "[i]op[/i]\x1b[5m",
                "total_timesteps": 8192,
                "eval_key": "k",
            },
            Outcome(
                passed=True,
                stage="full",
                env_scores=_scores(1.1),
                fitness=1.1,
                warnings=[text],
            ),
        )
        store.record_candidate(
            {
                **base,
                "id": f"{run}-1",
                "seq": 1,
                "hash": "h1",
                "name": NAME,
                "thought": text,
                "code": f"def drift(ratio, advantage, epsilon):\n    # {MARKUP}\x1b[2J\n",
                "parent_ids": [f"{run}-0"],
                "generation": 1,
                "proposer": "llm:[red]m[/red]",
                "total_timesteps": 8192,
                "eval_key": "k",
            },
            Outcome.failure("probes", text),
            calls=[
                {
                    "model": "openai/[b]m[/b]",
                    "prompt": [{"role": "user", "content": text}],
                    "reply": text,
                    "error": f"APIError {HOSTILE}",
                }
            ],
        )
        store.finish_run(run, "stopped", text)
    return path


@pytest.mark.parametrize(
    "command, literal",
    [
        (["show", "r1-1"], MARKUP),
        (["show", "r1-1", "--full"], MARKUP),
        (["show", "r1-0"], MARKUP),
        (["leaderboard"], "ev[b]n[/b]\\x1b[31m"),
        (["leaderboard", "--all-runs"], "ev[b]n[/b]\\x1b[31m"),
        (["leaderboard", "--json"], "ev[b]n[/b]\\u001b[31m"),
        (["lineage", "r1-1"], "ev[b]n[/b]\\x1b[31m"),
        (["runs"], "green]PASSED[/]"),
        (["export", "r1", "--format", "csv"], MARKUP),
        (["export", "r1"], "[bold green]PASSED[/]"),
    ],
)
def test_archived_hostile_text_prints_inert(hostile_archive, command, literal):
    result = invoke(*command, "--archive", str(hostile_archive))
    assert result.exit_code == 0, result.output
    assert_inert(result.output)
    assert literal in result.output  # markup as text, escapes visible: nothing interpreted


def test_show_prints_every_hostile_field_visibly(hostile_archive):
    out = invoke("show", "r1-1", "--full", "--archive", str(hostile_archive)).output
    for panel in ("failure reason", "thought", "code", "prompt", "reply"):
        assert panel in out
    assert out.count("[link=http://evil.invalid]x[/link]") >= 4  # reason, thought, prompt, reply
    assert "\\x1b[32mPASSED\\x1b[0m" in out and "\\x1b]0;pwned\\x07" in out
    assert "\\x0dfitness 999\\x08\\x08" in out and "\\u202eevil" in out
    assert "error: APIError \\x1b[2J" in out


def test_export_to_a_file_keeps_the_archived_text_exact(hostile_archive, tmp_path):
    out = tmp_path / "r1.csv"
    result = invoke("export", "r1", "-f", "csv", "-o", str(out), "--archive", str(hostile_archive))
    assert result.exit_code == 0, result.output
    assert HOSTILE.encode() in out.read_bytes()


def test_discovery_progress_lines_and_live_panel_print_inert():
    view = Display(live=False, budget=2)
    event = {
        "id": "r1-3",
        "name": NAME,
        "status": "failed",
        "stage": "probes",
        "reason": f"{MARKUP} {HOSTILE}",
        "operator": "[i]op[/i]",
        "eval_s": 2.0,
    }
    with console.capture() as captured:
        view("submitted", {"id": "r1-4", "name": NAME})
        view("status", {"text": f"asking the LLM {HOSTILE}"})
        view("candidate", event)
        view("confirm", {"id": "r1-3", "name": MARKUP, "fitness": 1.0, "confirmed": 1.1})
        check = {"id": "r1-3", "incumbent": "r1-0", "factor": 5.0, "verdict": "worse"}
        check.update(poi=0.0, poi_low=0.0, poi_high=0.0, runs=4, env="Breakout-MinAtar")
        view("stability", check)
        view("done", {"status": "stopped", "reason": HOSTILE})
        console.print(view.render())  # what the live panel shows on a terminal
    out = captured.get()
    assert_inert(out)
    assert "ev[b]n[/b]\\x1b[31m" in out and "[i]op[/i]" in out
    assert "[bold green]PASSED[/]" in out and "\\x1b]0;pwned\\x07" in out
    assert "r1-3 against r1-0 at 5x the budget: worst on Breakout-MinAtar" in out
    assert "kept the incumbent" in out


def test_evaluate_prints_a_candidates_reason_warnings_and_output_inert():
    outcome = Outcome.failure(
        "probes", f"{MARKUP} {HOSTILE}", warnings=[f"{MARKUP}{HOSTILE}"], stdout=HOSTILE
    )
    with console.capture() as captured:
        print_outcome(outcome, Path("[red]evil.py"), "drift", CascadeSettings(suite="smoke"))
    out = captured.get()
    assert_inert(out)
    assert "FAILED" in out and MARKUP in out and "[red]evil.py" in out
    assert "\\x1b[32mPASSED\\x1b[0m" in out


def test_method_progress_and_results_print_inert():
    failed = Outcome.failure("full", f"{MARKUP} {HOSTILE}")
    derived = SimpleNamespace(
        outcome=failed, teacher_fitness=None, teacher_id="r1-0", candidate_id="r2-0", run_id="r2"
    )
    rate = SimpleNamespace(value=0.5, low=0.1, high=0.9)
    mean = SimpleNamespace(value=None, low=None, high=None, count=0)
    score = SimpleNamespace(
        label=f"{MARKUP}{HOSTILE}",
        completions=4,
        excluded=0,
        passed={s: rate for s in ("parse", "static", "probes", "short", "full")},
        duplicates=rate,
        reward=mean,
        fitness=mean,
        best_fitness=None,
        tokens_per_s=10.0,
    )
    with console.capture() as captured:
        methods_cli._ESProgress(2)(
            "export",
            {"id": "r2-0", "generation": 1, "status": "failed", "fitness": None, "reason": MARKUP},
        )
        methods_cli._print_derived("distilled", derived, "metarl.db")
        console.print(grpo_cli.score_table([score], f"proposers {MARKUP}"))
    out = captured.get()
    assert_inert(out)
    assert out.count("[bold green]PASSED[/]") >= 3


# -- end to end: `metarl discover --proposer llm --api-base` with a password ----------------

METARL = str(Path(sys.executable).with_name("metarl"))
FAST = [
    "--suite",
    "smoke",
    "--timesteps",
    "4096",
    "--seeds",
    "1",
    "--no-confirm",
    "--no-heldout",
    "--skip-short",
    "--workers",
    "1",
    "--no-live",
    "--llm-timeout",
    "20",
]


def _metarl(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [METARL, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=500
    )


@pytest.mark.slow  # end to end: a discover run and its resume as subprocesses (~45 s)
def test_an_api_base_password_reaches_the_server_and_nothing_else(tmp_path):
    db = tmp_path / "metarl.db"
    with ScriptedLLMServer([]) as server:
        api_base = f"http://alice:{PASSWORD}@127.0.0.1:{server.port}/v1"
        echoed = f"{api_base}?api_key={KEY}"
        # the provider's error quotes the URL and the key; then a reply with no program
        server.push(Reply(status=400, text=f"rejected {echoed} for alice:{PASSWORD}"))
        server.default = "Sorry, I will not write code today."
        run = _metarl(
            tmp_path,
            "discover",
            "--proposer",
            "llm",
            "--model",
            "openai/scripted",
            "--api-base",
            api_base,
            "--budget",
            "1",
            "--children",
            "1",
            "--archive",
            str(db),
            "--report",
            "--verbose",
            *FAST,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert server.requests and all(
            (a or "").startswith("Basic ") for a in server.authorizations
        )
        resumed = _metarl(tmp_path, "resume", "r1", "--budget", "2", "--archive", str(db))
    # the credentials were never archived, so a resume must be given them again
    assert resumed.returncode == 2 and "give --api-base again" in resumed.stderr
    reports = list(tmp_path.glob("report-*.html"))
    assert reports, run.stdout
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.startswith("metarl.db") for p in files)
    texts = {"stdout": run.stdout, "stderr": run.stderr}
    texts |= {"resume stdout": resumed.stdout, "resume stderr": resumed.stderr}
    texts |= {str(p.relative_to(tmp_path)): p.read_bytes().decode("latin-1") for p in files}
    for where, text in texts.items():
        assert PASSWORD not in text and KEY not in text, f"a credential in {where}"
    assert "http://***@127.0.0.1" in run.stderr  # the logged config: redacted, not dropped
    with Archive(db) as store:
        stored = store.get_run("r1")
        errors = [c["error"] for c in store.query("SELECT error FROM calls WHERE run_id = 'r1'")]
    assert stored["config"]["api_base"] == api_base.replace(f"alice:{PASSWORD}", "***")
    assert any(e and "rejected http://***@127.0.0.1" in e for e in errors), errors
