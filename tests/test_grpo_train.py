"""GRPO on the proposer, end to end on CPU: a tiny Llama built in the test, trl's GRPOTrainer
with a LoRA adapter, the real reward (the sandboxed cascade on the smoke suite), every
completion archived, a run stopped by its time budget and resumed from its saved step, the
trained checkpoint measured; and the `train-proposer` / `eval-proposer` commands."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import report_pages
import torch
from conftest import invoke
from safetensors.torch import load_file
from tiny_proposer import build_tiny_proposer, replies, scripted_rollout

from metarl.archives.store import Archive
from metarl.grpo.settings import GRPOSettings, TrainError
from metarl.grpo.train import ProposerTraining, evaluate_proposers
from metarl.report.page import write_report

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in trl

STATIC_FAIL = json.dumps(
    {"name": "io", "code": "import os\n\ndef drift(ratio, advantage, epsilon):\n    return ratio"}
)
# a new valid program, a copy of the PPO-clip seed, a refused program, nothing: spread in every
# group of four
SCRIPT = [replies()[0], replies()[1], STATIC_FAIL, ""]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_proposer(tmp_path_factory.mktemp("tiny") / "model")


def settings_for(model: Path, out: Path, **changes) -> GRPOSettings:
    values = dict(
        model=str(model),
        suite="smoke",
        timesteps=8192,
        train_seeds=1,
        seed_values=[0],
        steps=2,
        sft_steps=2,
        generations=4,
        max_completion_tokens=24,
        heldout_prompts=1,
        output_dir=str(out / "proposer"),
    )
    return GRPOSettings(**(values | changes)).resolved()


@pytest.fixture(scope="module")
def resumed_run(tiny_model, seeded_archive_template, tmp_path_factory):
    """A two-step run stopped by its time budget after step 1, then resumed to step 2."""
    out = tmp_path_factory.mktemp("grpo")
    path = out / "metarl.db"
    shutil.copy(seeded_archive_template, path)
    with Archive(path) as archive:
        first = ProposerTraining(
            settings_for(tiny_model, out, max_time=1e-6),
            archive,
            rollout_func=scripted_rollout(SCRIPT),
        ).run()
        second = ProposerTraining(
            settings_for(tiny_model, out),
            archive,
            resume=first.run_id,
            rollout_func=scripted_rollout(SCRIPT),
        ).run()
    return path, out, first, second


def lora_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    weights = load_file(str(checkpoint / "adapter_model.safetensors"))
    return {name: value for name, value in weights.items() if "lora_B" in name}


def test_grpo_steps_with_the_real_reward_change_the_lora_weights(resumed_run):
    _, out, _, second = resumed_run
    after_one = lora_weights(out / "proposer" / "grpo" / "checkpoint-1")
    after_two = lora_weights(out / "proposer" / "grpo" / "checkpoint-2")
    assert after_one and after_one.keys() == after_two.keys()
    # LoRA's B matrices start at zero: the first step moved them, the second moved them again
    assert any(w.abs().sum() > 0 for w in after_one.values())
    assert any(not torch.equal(after_one[n], after_two[n]) for n in after_one)
    assert second.zero_spread == 0 and second.groups == 2


def test_a_run_stopped_by_its_budget_resumes_from_its_saved_step(resumed_run):
    path, _, first, second = resumed_run
    assert (first.status, first.step) == ("stopped", 1)
    assert (second.status, second.step, second.run_id) == ("finished", 2, first.run_id)
    with Archive(path) as archive:
        rows = archive.run_candidates(second.run_id)
        run = archive.get_run(second.run_id)
    steps = sorted(r["meta"]["step"] for r in rows if r["meta"]["phase"] == "train")
    assert steps == [0, 0, 0, 0, 1, 1, 1, 1]  # step 1 ran once, in the resumed session
    assert run["status"] == "finished" and run["state"]["phase"] == "done"


def test_every_completion_is_archived_with_its_method_step_checkpoint_and_verdict(resumed_run):
    path, out, _, second = resumed_run
    with Archive(path) as archive:
        rows = archive.run_candidates(second.run_id)
        calls = archive.calls(rows[0]["id"])
    train = [r for r in rows if r["meta"]["phase"] == "train"]
    assert {r["method"] for r in rows} == {"grpo"}
    assert {r["meta"]["checkpoint"] for r in train if r["meta"]["step"] == 1} == {
        str(out / "proposer" / "grpo" / "checkpoint-1")
    }
    assert {r["meta"]["checkpoint"] for r in train if r["meta"]["step"] == 0} == {
        str(out / "proposer" / "sft")
    }
    verdicts = sorted(r["meta"]["verdict"] for r in train)
    assert verdicts == sorted(["scored", "duplicate", "static", "no-program"] * 2)
    scored = [r for r in train if r["meta"]["verdict"] == "scored"]
    assert scored[0]["status"] == "passed" and scored[1]["cached_from"] == scored[0]["id"]
    assert all(r["meta"]["prompt"] for r in train)
    assert calls and calls[0]["reply"] is not None and calls[0]["prompt"][0]["role"] == "system"


def test_the_proposer_is_measured_before_and_after_on_held_out_prompts(resumed_run):
    path, out, _, second = resumed_run
    assert [s.label for s in second.scores] == ["base", "sft", "trained"]
    assert all(s.completions == 4 for s in second.scores)
    assert second.checkpoint == str(out / "proposer" / "final")
    assert (out / "proposer" / "final" / "config.json").exists()
    with Archive(path) as archive:
        run = archive.get_run(second.run_id)
        held = {p["id"] for p in run["state"]["prompts"]["heldout"]}
        trained_on = {p["id"] for p in run["state"]["prompts"]["train"]}
        rows = archive.run_candidates(second.run_id)
    assert held and not held & trained_on
    measured = {r["meta"]["prompt"] for r in rows if r["meta"]["phase"] != "train"}
    assert measured == held


def test_eval_proposer_measures_a_checkpoint_on_the_same_held_out_prompts(resumed_run):
    path, out, _, second = resumed_run
    with Archive(path) as archive:
        scores = evaluate_proposers(archive, second.run_id, [str(out / "proposer" / "final")])
        rows = archive.run_candidates(second.run_id)
    assert len(scores) == 1 and scores[0].completions == 4
    assert sum(r["meta"]["phase"].startswith("eval:") for r in rows) == 4


def test_the_report_draws_reward_and_pass_rates_per_step(resumed_run, tmp_path):
    path, _, _, second = resumed_run
    with Archive(path) as archive:
        steps = archive.get_run(second.run_id)["state"]["steps"]
        write_report(archive, [second.run_id], tmp_path / "grpo.html")
    pages = report_pages.sections((tmp_path / "grpo.html").read_text())
    table = report_pages.rows(pages[(second.run_id, "grpo")], "step")
    assert [s["step"] for s in steps] == [1, 2] and sorted(table) == ["1", "2"]
    for step in steps:
        cells = table[str(step["step"])]
        rates = [f"{v:.2f}" if v is not None else "—" for v in step["pass_rates"].values()]
        assert cells[1] == f"{step['mean_reward']:.3f}" and cells[2 : 2 + len(rates)] == rates
    assert (second.run_id, "fitness") in pages and (second.run_id, "funnel") in pages


def test_a_resume_with_other_training_options_is_refused(resumed_run, tiny_model):
    path, out, _, second = resumed_run
    with Archive(path) as archive, pytest.raises(TrainError, match="other training options"):
        ProposerTraining(settings_for(tiny_model, out, lr=0.5), archive, resume=second.run_id).run()


def test_train_proposer_command_runs_reports_zero_spread_and_the_table(
    tiny_model, seeded_archive, tmp_path, restore_logging
):
    # the random tiny model writes no program: every group has zero spread, which is reported,
    # and the batch is generated again twice (the default --resample 2) before the update
    result = invoke(
        "train-proposer",
        *("--model", str(tiny_model), "--suite", "smoke", "--timesteps", "8192"),
        *("--train-seeds", "1", "--steps", "1", "--sft-steps", "0", "-G", "2"),
        *("--max-tokens", "16", "--heldout-prompts", "1", "--output", str(tmp_path / "p")),
        *("--archive", str(seeded_archive)),
    )
    assert result.exit_code == 0, result.output
    assert "zero-spread groups 3/3, 2 batches generated again" in result.output
    assert "held-out prompts" in result.output and "trained" in result.output
    assert f"--model {tmp_path / 'p' / 'final'}" in result.output.replace("\n", "")
    again = invoke("eval-proposer", "r2", "--archive", str(seeded_archive))
    assert again.exit_code == 0, again.output
    assert "proposers on the held-out prompts of r2" in again.output
    with Archive(seeded_archive) as archive:
        phases = [r["meta"]["phase"] for r in archive.run_candidates("r2")]
    # the base model and the trained one, 2 completions each of the 1 held-out prompt
    assert sorted(p for p in phases if p.startswith("eval:")) == sorted(
        [f"eval:{tiny_model}"] * 2 + [f"eval:{tmp_path / 'p' / 'final'}"] * 2
    )


def test_train_proposer_refuses_a_bad_option_in_one_line_before_any_archive(tmp_path):
    path = tmp_path / "none.db"
    result = invoke("train-proposer", "-G", "1", "--archive", str(path))
    assert result.exit_code == 2
    assert "--generations must be at least 2" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not path.exists()


def test_a_missing_model_is_one_line_and_creates_no_archive(tmp_path):
    path = tmp_path / "none.db"
    result = invoke("train-proposer", "--model", str(tmp_path / "nope"), "--archive", str(path))
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"metarl train-proposer: error: no model at {tmp_path / 'nope'}: no such file or directory"
    )
    assert not path.exists()


def test_a_run_that_fails_is_recorded_as_failed_with_its_reason(tmp_path, restore_logging):
    not_a_model = tmp_path / "empty-dir"
    not_a_model.mkdir()
    path = tmp_path / "metarl.db"
    result = invoke(
        "train-proposer",
        *("--model", str(not_a_model), "--suite", "smoke", "--archive", str(path)),
    )
    assert result.exit_code == 1 and "cannot load model" in result.output
    with Archive(path) as archive:
        run = archive.get_run("r1")
    assert run["status"] == "failed" and "ModelLoadError" in run["stop_reason"]
