"""trl's `GRPOTrainer` with the two choices `train-proposer` adds: the policy-gradient loss's
baseline (`--loss`) and what happens to a generation batch whose groups have no reward spread.

**`--loss grpo`** is trl's own: each completion's advantage is its reward minus its group's
mean (the G completions of one prompt), divided by the group's standard deviation.

**`--loss reinforce`** is REINFORCE with a mean baseline and a KL penalty, the algorithm of the
LLM_RL seed: the advantage is the reward minus the mean reward of the whole generation batch
(every prompt of the step), not scaled, and `--beta` weighs the KL to the reference model (trl
keeps the reference and adds beta x KL to the loss, as it does for GRPO). With one prompt per
step the two baselines are the same mean; they differ in the scaling (REINFORCE keeps reward
units, so a group whose rewards are all close still moves little) and, with several prompts per
step, in that a prompt whose completions all do well is pushed up as a whole. A completion the
evaluator could not judge (reward None) gets no advantage under either loss.

**Zero-spread batches are resampled.** A group whose rewards are all equal has no advantage
under GRPO: trl would spend an update on it and learn nothing (last round on the CPU, 2 of 4
steps of SmolLM2-135M). When *every* group of a generation batch lacks spread, the batch is
generated and judged again, up to `resample` times, before the update (the discarded
completions are archived like any other: they are real proposals). A batch in which some
groups have spread is kept whole: trl pads and splits a generation batch as one, so dropping
single groups would mean re-padding its tensors; the zero-spread groups in it get no gradient.

Nothing else of trl's loop is replaced: `_generate_and_score_completions` is called as trl
calls it, and only the advantages of its output are rewritten for REINFORCE.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from trl import GRPOTrainer

from metarl.grpo.settings import LOSSES

logger = logging.getLogger(__name__)


def mean_baseline_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE's advantages: each reward minus the batch's mean reward, unscaled.

    Args:
        rewards: one reward per completion (NaN: could not be judged).

    Returns:
        The advantages; 0 where the reward is NaN (and everywhere when none is finite).
    """
    finite = ~torch.isnan(rewards)
    if not finite.any():
        return torch.zeros_like(rewards)
    baseline = rewards[finite].mean()
    return torch.where(finite, rewards - baseline, torch.zeros_like(rewards))


def zero_spread(rewards: torch.Tensor, group: int) -> list[bool]:
    """Per group of `group` consecutive completions (trl's order): whether its judged rewards
    are all equal (or fewer than two were judged), i.e. whether GRPO learns nothing from it."""
    flags = []
    for start in range(0, rewards.numel(), max(1, group)):
        values = rewards[start : start + group]
        values = values[~torch.isnan(values)]
        flags.append(values.numel() < 2 or float(values.max() - values.min()) < 1e-9)
    return flags


class ProposerTrainer(GRPOTrainer):
    """`GRPOTrainer` with a choice of baseline and zero-spread resampling (module docstring).

    Args:
        loss: "grpo" (group baseline, scaled) or "reinforce" (batch-mean baseline, unscaled).
        resample: how many times a generation batch whose every group lacks spread is
            generated again before the update (0: never).
        *args, **kwargs: as `GRPOTrainer`.
    """

    def __init__(self, *args: Any, loss: str = "grpo", resample: int = 0, **kwargs: Any):
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}; choose one of: {', '.join(LOSSES)}")
        super().__init__(*args, **kwargs)
        self.loss = loss
        self.resample = int(resample)
        self.resampled = 0  # generation batches thrown away for lack of spread, over the run
        self._rewards: torch.Tensor | None = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        self._rewards = rewards
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        tries = 0
        while self.model.training and tries < self.resample and self._all_zero_spread():
            tries += 1
            self.resampled += 1
            logger.info("no group of the batch has reward spread: resampling (%d)", tries)
            output = super()._generate_and_score_completions(inputs)
        if self.loss == "reinforce" and self._rewards is not None:
            advantages = mean_baseline_advantages(self._rewards.float())
            local = output["advantages"].numel()
            start = self.accelerator.process_index * local
            output["advantages"] = advantages[start : start + local].to(output["advantages"])
        return output

    def _all_zero_spread(self) -> bool:
        if self._rewards is None:
            return False
        return all(zero_spread(self._rewards, self.num_generations))
