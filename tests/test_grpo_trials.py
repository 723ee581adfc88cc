"""Multi-turn GRPO trials, the REINFORCE baseline and zero-spread resampling: a trial's reward
follows the stated rule, the model's tokens are trained and the feedback's masked, the
REINFORCE advantages are the batch-mean baseline's, and a run with `--attempts 2 --loss
reinforce` trains end to end on a tiny model with the real cascade."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from tiny_proposer import build_tiny_proposer, replies, scripted_rollout

from metarl.archives.store import Archive
from metarl.evaluation.outcome import Outcome
from metarl.grpo.rewards import CascadeReward, KnownPrograms
from metarl.grpo.settings import GRPOSettings, GRPOSettingsError
from metarl.grpo.train import ProposerTraining
from metarl.grpo.trainer import mean_baseline_advantages, zero_spread
from metarl.grpo.trials import TrialReward, TrialRollout, trial_return, trial_tokens
from metarl.tasks import get_task

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in trl

TASK = get_task("drift")
PPO = TASK.seed_program("ppo_clip").source


def reply(code: str, name: str) -> str:
    return json.dumps({"thought": "t", "name": name, "code": code})


def program(scale: float) -> str:
    """A valid drift whose fake fitness is `scale` (read back by FitnessFromSource)."""
    return PPO.replace("1.0 - epsilon, 1.0 + epsilon", f"1.0 - {scale} * epsilon, 1.0 + epsilon")


class FitnessFromSource:
    """A fake evaluator: a program passes with the scale it writes before `* epsilon` as its
    fitness; anything else fails the probes."""

    def __init__(self):
        self.batches: list[list[str]] = []

    def evaluate_batch(self, sources, task, known_fingerprints=None):
        self.batches.append(list(sources))
        outcomes = []
        for source in sources:
            marker = "1.0 - "
            if marker in source and " * epsilon" in source:
                value = float(source.split(marker, 1)[1].split(" * epsilon", 1)[0])
                outcomes.append(Outcome(passed=True, stage="full", fitness=value))
            else:
                outcomes.append(Outcome.failure("probes", "no drift"))
        return outcomes


class Tokenizer:
    """A whitespace tokenizer with a ChatML-like template (enough for trial_tokens)."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
        text = "".join(f"<{m['role']}> {m['content']} </turn> " for m in messages)
        return text + ("<assistant> " if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]}

    def words(self, ids):
        inverse = {v: k for k, v in self.vocab.items()}
        return [inverse[i] for i in ids]


class Trainer:
    def __init__(self):
        self.processing_class = Tokenizer()
        self.state = type("State", (), {"global_step": 3})()


def scripted(turns: list[list[str]]):
    """generate(): attempt t answers every dialogue with turns[t][i] (trial i)."""
    calls = {"n": 0}

    def generate(dialogues, trainer):
        texts = turns[calls["n"] % len(turns)]
        calls["n"] += 1
        assert len(texts) == len(dialogues)
        return list(texts)

    return generate


def rollout_of(rule: str, turns, discount: float = 0.5):
    evaluator = FitnessFromSource()
    reward = CascadeReward(evaluator, TASK, KnownPrograms(), group=2)
    rows = [{"prompt": [{"role": "user", "content": "write a drift"}], "parent_ids": "[]"}]
    rollout = TrialRollout(reward, rows, 2, rule, discount, generate=scripted(turns))
    return rollout, evaluator


# -- the trial's reward -----------------------------------------------------------------------


def test_a_trial_reward_is_the_best_the_last_or_the_discounted_sum_of_its_attempts():
    assert trial_return([0.2, 1.5], "best") == 1.5
    assert trial_return([1.5, 0.2], "best") == 1.5
    assert trial_return([1.5, 0.2], "last") == 0.2
    assert trial_return([1.0, 2.0], "discounted", 0.5) == pytest.approx(1.0 + 0.5 * 2.0)
    assert trial_return([None, 0.7], "last") == 0.7  # an unjudged attempt is left out
    assert trial_return([1.0, None], "discounted", 0.5) == 1.0
    assert trial_return([None, None], "best") is None
    with pytest.raises(ValueError, match="unknown trial reward"):
        trial_return([1.0], "mean")


@pytest.mark.parametrize(
    "rule, expected",
    [
        ("best", [1.5, -0.5]),
        ("last", [1.5, -0.5]),
        ("discounted", [0.25 + 0.5 * 1.5, -1.0 + 0.5 * -0.5]),
    ],
)
def test_a_two_attempt_trials_reward_follows_the_stated_rule(rule, expected):
    # trial 0 improves (0.25 then 1.5); trial 1 writes no program, then one failing the probes
    turns = [
        [reply(program(0.25), "first"), "no program here"],
        [reply(program(1.5), "second"), reply("def drift(r, a, e):\n    return r", "bad")],
    ]
    rollout, evaluator = rollout_of(rule, turns)
    trainer = Trainer()
    prompts = [[{"role": "user", "content": "write a drift"}]] * 2
    output = rollout(prompts, trainer)
    assert rollout.trials == [[0.25, 1.5], [-1.0, -0.5]]
    assert output["trial_reward"] == pytest.approx(expected)
    # what trl's reward call reads back
    assert (
        TrialReward()(prompts, [None, None], trial_reward=output["trial_reward"])
        == (output["trial_reward"])
    )
    # one evaluation batch per attempt across the trials, the unparseable reply never sent
    assert len(evaluator.batches) == 2 and len(evaluator.batches[0]) == 1


def test_the_second_attempt_reads_the_verdict_on_the_first():
    seen = []

    def generate(dialogues, trainer):
        seen.append([list(d) for d in dialogues])
        return [reply(program(0.5 + len(seen)), f"p{len(seen)}")]

    reward = CascadeReward(FitnessFromSource(), TASK, KnownPrograms(), group=1)
    rows = [{"prompt": [{"role": "user", "content": "write a drift"}], "parent_ids": "[]"}]
    TrialRollout(reward, rows, 2, "best", generate=generate)([rows[0]["prompt"]], Trainer())
    first, second = seen
    assert len(first[0]) == 1 and len(second[0]) == 3
    assert second[0][1]["role"] == "assistant" and second[0][2]["role"] == "user"
    assert "1.5" in second[0][2]["content"]  # the fitness of the first program, fed back


def test_the_models_tokens_are_trained_and_the_feedbacks_masked():
    tokenizer = Tokenizer()
    prompt = [{"role": "user", "content": "task words"}]
    turns = [
        {"role": "assistant", "content": "alpha beta"},
        {"role": "user", "content": "verdict gamma"},
        {"role": "assistant", "content": "delta"},
        {"role": "user", "content": "final verdict"},  # after the last reply: not in the trial
    ]
    prompt_ids, completion, mask = trial_tokens(tokenizer, prompt, turns)
    words = tokenizer.words(completion)
    trained = [w for w, m in zip(words, mask) if m]
    masked = [w for w, m in zip(words, mask) if not m]
    assert tokenizer.words(prompt_ids)[-1] == "<assistant>"
    assert {"alpha", "beta", "delta"} <= set(trained)
    assert "verdict" in masked and "gamma" in masked and "final" not in words
    assert len(mask) == len(completion)


# -- the REINFORCE baseline and zero-spread groups ------------------------------------------


def test_reinforce_advantages_are_rewards_minus_the_batch_mean_unscaled():
    rewards = torch.tensor([1.0, 0.0, 3.0, float("nan")])
    advantages = mean_baseline_advantages(rewards)
    assert advantages.tolist() == pytest.approx([-1 / 3, -4 / 3, 5 / 3, 0.0])
    assert mean_baseline_advantages(torch.tensor([float("nan")] * 2)).tolist() == [0.0, 0.0]


def test_a_group_without_reward_spread_is_flagged_per_group():
    rewards = torch.tensor([1.0, 1.0, 0.0, 2.0, float("nan"), 5.0])
    assert zero_spread(rewards, 2) == [True, False, True]


def test_unknown_loss_and_trial_options_are_refused_in_one_line():
    for changes, message in [
        ({"loss": "ppo"}, "--loss"),
        ({"attempts": 0}, "--attempts"),
        ({"trial_reward": "mean"}, "--trial-reward"),
        ({"resample": -1}, "--resample"),
    ]:
        with pytest.raises(GRPOSettingsError, match=message):
            GRPOSettings(**changes).resolved()


def test_a_run_stored_before_the_new_options_keeps_its_hash_and_legacy_behaviour():
    stored = GRPOSettings().to_dict()
    for key in ("loss", "resample", "attempts", "trial_reward", "trial_discount", "sft_data"):
        stored.pop(key, None)
    legacy = GRPOSettings.stored(stored)
    assert legacy.resample == 0 and legacy.attempts == 1 and legacy.loss == "grpo"
    assert legacy.hash() == GRPOSettings.stored({**stored, "resample": 0}).hash()
    assert GRPOSettings().hash() != legacy.hash()  # the new default resamples


# -- end to end -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_proposer(tmp_path_factory.mktemp("tiny") / "model")


def one_step_run(model: Path, template: Path, tmp_path: Path, **changes):
    """A copy of the seeded archive and the settings of a one-step run of the tiny model
    (groups of 2, the smoke suite's reward on one pinned seed) with `changes`."""
    path = tmp_path / "metarl.db"
    shutil.copy(template, path)
    values = dict(
        model=str(model),
        suite="smoke",
        timesteps=8192,
        train_seeds=1,
        seed_values=[0],
        steps=1,
        sft_steps=0,
        generations=2,
        max_completion_tokens=24,
        heldout_prompts=0,
        output_dir=str(tmp_path / "proposer"),
    )
    return path, GRPOSettings(**(values | changes)).resolved()


def test_a_two_attempt_reinforce_run_trains_and_archives_every_attempt(
    tiny_model, seeded_archive_template, tmp_path
):
    path, settings = one_step_run(
        tiny_model, seeded_archive_template, tmp_path, attempts=2, loss="reinforce", beta=0.04
    )
    # trial 0: a new valid program, then nothing; trial 1: nothing twice (spread: 1.0 vs -1.0)
    turns = [[replies()[0], ""], ["", ""]]
    with Archive(path) as archive:
        result = ProposerTraining(settings, archive, generate=scripted(turns)).run()
        rows = archive.run_candidates(result.run_id)
    assert result.status == "finished" and result.step == 1
    assert len(rows) == 4  # 2 trials x 2 attempts, each archived
    prompts = [
        json.loads(c["prompt"]) if isinstance(c["prompt"], str) else c["prompt"]
        for r in rows
        for c in archive_calls(path, r["id"])
    ]
    # the second attempts were written after reading the verdict on the first
    assert sorted(len(p) for p in prompts) == [2, 2, 4, 4]


def archive_calls(path: Path, cid: str) -> list[dict]:
    with Archive(path) as archive:
        return archive.calls(cid)


def test_a_batch_without_reward_spread_is_generated_again_before_the_update(
    tiny_model, seeded_archive_template, tmp_path
):
    path, settings = one_step_run(tiny_model, seeded_archive_template, tmp_path, resample=1)
    with Archive(path) as archive:
        # every reply is empty: no group ever has spread
        result = ProposerTraining(settings, archive, rollout_func=scripted_rollout([""])).run()
        rows = archive.run_candidates(result.run_id)
        state = archive.get_run(result.run_id)["state"]
    assert result.status == "finished" and result.step == 1
    assert state["resampled"] == 1
    assert len(rows) == 4  # both batches' completions are archived proposals
