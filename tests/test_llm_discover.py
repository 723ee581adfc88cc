"""End to end: `metarl discover --proposer llm` as a subprocess against the scripted
chat-completions server on 127.0.0.1, with tiny training budgets (smoke suite, 4096 steps, one
seed). Checks that every kind of reply ends up in the archive as a candidate with a clear fate,
with its prompt, reply, model, tokens, cost and latency; that `--max-cost` stops a run cleanly;
and that a conversation-mode run resumes the same dialogue. About two minutes on 2 cores (the
two seed evaluations, cached for the second test, and one trained child dominate; the other
children fail cheaply)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import report_pages
from llm_server import CLEAN_DRIFT, Reply, ScriptedLLMServer

# three discover runs as subprocesses against the scripted server (~2 minutes): the slow tier,
# which CI runs too; the LLM path's parts are tested fast in test_llm_*.py
pytestmark = pytest.mark.slow

METARL = str(Path(sys.executable).with_name("metarl"))
FAST = [
    "--suite",
    "smoke",
    "--timesteps",
    "4096",
    "--seeds",
    "1",
    "--seed-values",
    "0",
    "--no-confirm",
    "--no-heldout",
    "--skip-short",
    "--workers",
    "1",
    "--no-live",
    "--llm-timeout",
    "20",
]

NEGATIVE_DRIFT = (
    "I think a signed penalty could help exploration.\n\n```python\n"
    "def drift(ratio, advantage, epsilon):\n"
    "    return -jnp.abs(ratio - 1.0) * advantage\n```\nThis rewards moving away from the old "
    "policy."
)
NUMPY_DRIFT = (
    "Old version:\n```python\ndef drift(ratio, advantage, epsilon):\n    return ratio * 0.0\n```\n"
    "New version:\n```python\nimport numpy as np\n\ndef drift(ratio, advantage, epsilon):\n"
    "    return np.maximum(ratio - 1.0, 0.0) ** 2\n```"
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("llm_discover")


def metarl(workdir: Path, *args: str, timeout: int = 400) -> subprocess.CompletedProcess:
    # the session's METARL_CACHE_DIR (tests/conftest.py): the drift baseline at this budget is
    # trained once per session, not again for this module
    env = {**os.environ, "COLUMNS": "200"}
    assert env.get("METARL_CACHE_DIR"), "the session's cache is not set"
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [METARL, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )


def rows(db: Path, sql: str, params=()) -> list[dict]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(sql, params)]


def test_population_run_archives_every_reply(workdir):
    script = [
        Reply(status=429),
        CLEAN_DRIFT,  # child 1: rate limited, then clean JSON
        Reply(status=500),
        NEGATIVE_DRIFT,  # child 2: 5xx, then prose + fenced code
        '{"thought": "cut", "name": "x", "code": "def drift(ratio, adv',  # child 3: truncated,
        "Sorry, I cannot write that function.",  #   repair fails
        Reply(empty=True),
        NUMPY_DRIFT,  # child 4: empty, then two code blocks
    ]
    db = workdir / "metarl.db"
    with ScriptedLLMServer(script) as server:
        result = metarl(
            workdir,
            "discover",
            "--proposer",
            "llm",
            "--model",
            "openai/scripted",
            "--api-base",
            server.api_base,
            "--budget",
            "4",
            "--children",
            "4",
            "--max-concurrency",
            "1",
            "--archive",
            str(db),
            *FAST,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(server.requests) == 8
    run_id = rows(db, "SELECT id FROM runs WHERE mode = 'population'")[0]["id"]
    children = rows(
        db, "SELECT * FROM candidates WHERE is_seed = 0 AND run_id = ? ORDER BY seq", (run_id,)
    )
    assert len(children) == 4
    by_slot = {c["slot"]: c for c in children}
    assert by_slot[0]["status"] == "passed" and by_slot[0]["name"] == "quadratic_trust"
    assert by_slot[1]["stage"] == "probes" and by_slot[1]["reason"]
    assert by_slot[2]["status"] != "passed" and "no usable program" in by_slot[2]["reason"]
    assert by_slot[3]["stage"] == "static" and "numpy" in by_slot[3]["reason"]
    for child in children:
        assert (
            child["proposer"] == "llm:openai/scripted"
            and child["reason"]
            or child["status"] == "passed"
        )
        calls = rows(db, "SELECT * FROM calls WHERE candidate_id = ? ORDER BY id", (child["id"],))
        assert calls, child["id"]
        for call in calls:
            assert call["model"] == "openai/scripted" and call["latency_s"] > 0
            assert json.loads(call["prompt"])[0]["role"] == "system"
            assert call["cost_usd"] is None  # unpriced model: unknown, not an error
        assert any(c["reply"] for c in calls) and any(c["prompt_tokens"] for c in calls)
    assert len(rows(db, "SELECT * FROM calls WHERE candidate_id = ?", (by_slot[2]["id"],))) == 2

    shown = metarl(workdir, "show", by_slot[1]["id"], "--archive", str(db))
    assert shown.returncode == 0, shown.stderr
    for text in (
        "LLM call 1/1",
        "model openai/scripted",
        "tokens",
        "latency",
        "prompt",
        "reply",
        "signed penalty",
    ):
        assert text in shown.stdout


def test_the_report_sums_the_runs_llm_calls_per_model(workdir):
    """After the population run: its report's LLM section is the calls table, summed."""
    db = workdir / "metarl.db"
    run_id = rows(db, "SELECT id FROM runs WHERE mode = 'population'")[0]["id"]
    out = workdir / "llm-report.html"
    result = metarl(workdir, "report", run_id, "--out", str(out), "--archive", str(db))
    assert result.returncode == 0, result.stderr
    usage = report_pages.rows(report_pages.sections(out.read_text())[(run_id, "llm")], "model")
    calls = rows(
        db,
        "SELECT count(*) AS n, sum(error IS NOT NULL AND error != '') AS errors, "
        "sum(prompt_tokens) AS prompt, sum(completion_tokens) AS completion FROM calls "
        "WHERE run_id = ? AND model = 'openai/scripted'",
        (run_id,),
    )[0]
    assert calls["n"] >= 4  # one call per child at least; a failed reply is retried
    assert usage["openai/scripted"][1:5] == [
        str(calls["n"]),
        str(calls["errors"]),
        str(calls["prompt"]),
        str(calls["completion"]),
    ]
    assert usage["openai/scripted"][5] == "—"  # an unpriced model's cost is unknown, not $0


def test_conversation_run_with_cost_budget_and_resume(workdir):
    usage = {"prompt_tokens": 1_000_000, "completion_tokens": 1000}  # ~$0.15 a call (gpt-4o-mini)
    replies = [
        NEGATIVE_DRIFT.replace("signed", f"signed v{i}").replace("1.0)", f"{i}.0)")
        for i in range(1, 4)
    ]
    db = workdir / "metarl.db"  # the seeds' scores are cached from the first test
    with ScriptedLLMServer([Reply(text=r, usage=usage) for r in replies]) as server:
        base = ["--api-base", server.api_base, "--archive", str(db)]
        first = metarl(
            workdir,
            "discover",
            "--proposer",
            "llm",
            "--model",
            "openai/gpt-4o-mini",
            "--mode",
            "conversation",
            "--budget",
            "3",
            "--max-cost",
            "0.2",
            *base,
            *FAST,
        )
        assert first.returncode == 0, first.stdout + first.stderr
        run = rows(db, "SELECT * FROM runs WHERE mode = 'conversation'")[0]
        assert run["status"] == "stopped" and "cost" in run["stop_reason"]
        assert 0.2 <= run["cost_usd"] < 0.35
        assert len(server.requests) == 2

        resumed = metarl(
            workdir,
            "resume",
            run["id"],
            "--max-cost",
            "5",
            *base[2:],
            "--api-base",
            server.api_base,
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert len(server.requests) == 3
    third = server.requests[2]["messages"]
    # the same dialogue: system, opening, then (reply, feedback) for both earlier children
    assert [m["role"] for m in third] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert "signed v1" in third[2]["content"] and "signed v2" in third[4]["content"]
    assert "FAILED at stage `probes`" in third[3]["content"]
    archived = rows(
        db, "SELECT role, content FROM messages WHERE run_id = ? ORDER BY seq", (run["id"],)
    )
    assert [m["role"] for m in archived] == [m["role"] for m in third] + ["assistant", "user"]
    assert [m["content"] for m in archived[:6]] == [m["content"] for m in third]
    children = rows(
        db, "SELECT * FROM candidates WHERE is_seed = 0 AND run_id = ? ORDER BY seq", (run["id"],)
    )
    assert len(children) == 3 and all(c["cost_usd"] and c["cost_usd"] > 0.1 for c in children)
    assert children[1]["parent_ids"] and children[0]["id"] in children[1]["parent_ids"]
