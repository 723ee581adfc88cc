"""What `train-proposer` sees after each optimiser step: a trl callback that counts the step
in the run's state, reports it to the display (reward, pass rates, where the time went), and
stops the training at the time budget with a checkpoint, so a resume starts from that step.
Kept apart from `train.py`, which drives the phases and the run's record."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from transformers import TrainerCallback

from metarl.grpo.rewards import PASS_STAGES, CascadeReward, RewardStats

if TYPE_CHECKING:  # annotation only: train.py imports this module
    from metarl.grpo.train import ProposerTraining


@dataclass
class StepReport:
    """One optimiser step, as the progress display shows it."""

    step: int
    steps: int
    mean_reward: float | None
    pass_rates: dict[str, float | None]
    zero_spread: int
    groups: int
    kl: float | None
    tokens_per_s: float
    seconds: float  # the whole step: generate + evaluate + update
    generate_s: float  # sampling the completions (transformers or vllm)
    evaluate_s: float  # the reward: extraction, the cascade, the archive
    update_s: float  # log-probabilities, loss, backward, optimiser step
    resampled: int = 0  # generation batches generated again for lack of spread in this step


class StepProgress(TrainerCallback):
    """After each optimiser step: count it in the run's state, report it, and stop at the time
    budget (with a checkpoint, so the resume starts from this step)."""

    def __init__(self, training: "ProposerTraining", reward: CascadeReward):
        self.training = training
        self.reward = reward
        self.stopped: str | None = None
        self.trainer = None  # the ProposerTrainer, once built: its count of resampled batches
        self._seen = 0
        self._resampled = 0
        self._step_start = time.monotonic()

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        training = self.training
        budget = training.settings.max_time
        if budget is not None and training.elapsed() >= budget:
            self.stopped = f"time budget of {budget:g} s spent"
            control.should_training_stop = True
            control.should_save = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "reward" not in logs:
            return
        training = self.training
        calls: list[RewardStats] = self.reward.history[self._seen :]
        self._seen = len(self.reward.history)
        groups = sum(c.groups for c in calls)
        zero = sum(c.zero_spread for c in calls)
        scorable = sum(c.scorable for c in calls)
        seconds = time.monotonic() - self._step_start
        evaluate_s = sum(c.eval_s for c in calls)
        generate_s = (calls[0].started - self._step_start) if calls else 0.0
        tokens = sum(c.completion_tokens for c in calls)
        report = StepReport(
            step=state.global_step,
            steps=training.settings.steps,
            mean_reward=logs.get("reward"),
            pass_rates={
                stage: (sum(c.passed[stage] for c in calls) / scorable if scorable else None)
                for stage in PASS_STAGES
            },
            zero_spread=zero,
            groups=groups,
            kl=logs.get("kl"),
            tokens_per_s=tokens / generate_s if generate_s > 0 else 0.0,
            seconds=seconds,
            generate_s=generate_s,
            evaluate_s=evaluate_s,
            update_s=max(0.0, seconds - generate_s - evaluate_s),
        )
        resampled = getattr(self.trainer, "resampled", 0) - self._resampled
        self._resampled += resampled
        report.resampled = resampled
        training.state.resampled += resampled
        training.state.step = state.global_step
        training.state.groups += groups
        training.state.zero_spread += zero
        training.state.steps.append(asdict(report))
        training._save()
        training.on_event("step", report)
