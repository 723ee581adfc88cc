"""Multi-turn GRPO: each completion trl trains on is a *trial* of k programs, the model reading
the evaluator's verdict on each before writing the next (MetaRLGym's "fast RL within a trial";
the conversation-mode proposer's loop, `grpo.environment.DiscoveryEnv`).

    for each prompt of the batch (G trials per prompt, one GRPO group):
        dialogue = the prompt
        for attempt in 1..k:
            reply   = the model's answer to the dialogue       (its tokens are trained)
            verdict = the cascade's judgement, one batch per attempt across the trials
            dialogue += reply, feedback on the verdict          (feedback tokens are masked)
        the trial's reward = rule(reward of attempt 1..k)

**The trial's reward** (`--trial-reward`), stated and tested (`trial_return`):
- `best`: the best reward of its k programs: a search proposer is worth its best find, and a
  failed first attempt that the model repairs after reading the verdict costs nothing;
- `last`: the last program's reward: rewards improving on what the verdict said;
- `discounted`: sum over attempts t = 0..k-1 of discount^t x reward_t: rewards finding good
  programs early, and every program counts.
A program the evaluator could not judge (reward None) is left out of the rule; a trial with no
judged program has reward None (trl gives it no advantage).

This reaches trl through its own extension point, `GRPOTrainer(rollout_func=)`: the rollout
returns the prompt's token ids, the trial's token ids after it (the model's replies and the
feedback turns), an `env_mask` that is 1 on the model's tokens and 0 on the feedback's (trl
computes the loss on the model's tokens only), and the trial's reward as an extra column that
`TrialReward` hands back to trl. Every program of every trial is judged and archived by the
same `CascadeReward` as single-turn training, so both optimise the same evaluation.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Sequence

import torch

from metarl.grpo.environment import DiscoveryEnv
from metarl.grpo.rewards import CascadeReward
from metarl.grpo.settings import TRIAL_REWARDS

logger = logging.getLogger(__name__)

# generate(dialogues, trainer) -> one reply per dialogue (chat message lists)
Generate = Callable[[list[list[dict[str, str]]], Any], list[str]]


def trial_return(rewards: Sequence[float | None], rule: str, discount: float = 1.0) -> float | None:
    """The reward of a trial whose programs earned `rewards` (in attempt order).

    Args:
        rewards: each attempt's reward; None where the evaluator could not judge it.
        rule: "best", "last" or "discounted" (module docstring).
        discount: the per-attempt discount of "discounted".

    Returns:
        The trial's reward; None when no attempt was judged.
    """
    if rule not in TRIAL_REWARDS:
        choices = ", ".join(TRIAL_REWARDS)
        raise ValueError(f"unknown trial reward {rule!r}; choose one of: {choices}")
    judged = [(t, r) for t, r in enumerate(rewards) if r is not None]
    if not judged:
        return None
    if rule == "best":
        return max(r for _, r in judged)
    if rule == "last":
        return judged[-1][1]
    return sum(discount**t * r for t, r in judged)


class TrialReward:
    """trl's reward function for trials: the `trial_reward` column the rollout computed."""

    __name__ = "trial"  # trl names the reward's logged metrics after it

    def __call__(self, prompts=None, completions=None, trial_reward=None, **_: Any):
        return list(trial_reward or [None] * len(completions or []))


class TrialRollout:
    """trl's `rollout_func` playing one trial of `attempts` programs per prompt of the batch.

    Args:
        reward: judges and archives every program (the run's CascadeReward).
        rows: the training prompt rows (grpo.prompts.prompt_rows); trl passes the prompts'
            messages, and a trial needs the row's archive columns too.
        attempts: programs per trial.
        rule, discount: the trial's reward (`trial_return`).
        max_tokens, temperature: sampling of each reply.
        generate: the replies to a list of dialogues; None samples from the trainer's model
            (transformers). Tests pass scripted replies.
    """

    def __init__(
        self,
        reward: CascadeReward,
        rows: list[dict],
        attempts: int,
        rule: str = "best",
        discount: float = 1.0,
        max_tokens: int = 768,
        temperature: float = 1.0,
        generate: Generate | None = None,
    ):
        if attempts < 1:
            raise ValueError("a trial needs at least one attempt")
        self.reward = reward
        self.rows = {_key(row["prompt"]): row for row in rows}
        self.attempts = int(attempts)
        self.rule = rule
        self.discount = float(discount)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.generate = generate or self._sample
        self.trials: list[list[float | None]] = []  # the last batch's per-attempt rewards

    def __call__(self, prompts: list, trainer) -> dict:
        tokenizer = trainer.processing_class
        step = int(getattr(trainer.state, "global_step", 0) or 0)
        envs = []
        for prompt in prompts:
            row = self.rows.get(_key(prompt)) or {"prompt": prompt, "parent_ids": "[]"}
            env = DiscoveryEnv(self.reward, [row], attempts=self.attempts, step_count=step)
            env.reset(row=row)
            envs.append(env)
        dialogues = [list(row_prompt) for row_prompt in prompts]
        rewards: list[list[float | None]] = [[] for _ in envs]
        for _attempt in range(self.attempts):
            texts = self.generate(dialogues, trainer)
            columns: dict[str, list] = {}
            for env in envs:
                for key, value in env.columns().items():
                    columns.setdefault(key, []).extend(value)
            self.reward.score(texts, columns, step)
            for i, (env, verdict) in enumerate(zip(envs, self.reward.last_verdicts)):
                observed = env.advance(verdict)
                rewards[i].append(observed.reward)
                dialogues[i] = observed.observation
        self.trials = rewards
        prompt_ids, completion_ids, masks = [], [], []
        for prompt, dialogue in zip(prompts, dialogues):
            ids, completion, mask = trial_tokens(tokenizer, prompt, dialogue[len(prompt) :])
            prompt_ids.append(ids)
            completion_ids.append(completion)
            masks.append(mask)
        returns = [trial_return(r, self.rule, self.discount) for r in rewards]
        logger.info("trials of %d attempts: rewards %s -> %s", self.attempts, rewards, returns)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,
            "env_mask": masks,
            "trial_reward": returns,
        }

    def _sample(self, dialogues: list[list[dict[str, str]]], trainer) -> list[str]:
        """One sampled reply per dialogue from the trainer's (LoRA) model."""
        tokenizer, model = trainer.processing_class, trainer.model
        device = next(model.parameters()).device
        texts = []
        with torch.no_grad():
            for dialogue in dialogues:
                encoded = tokenizer.apply_chat_template(
                    dialogue, add_generation_prompt=True, return_tensors="pt", return_dict=True
                )
                input_ids = encoded["input_ids"].to(device)
                output = model.generate(
                    input_ids=input_ids,
                    attention_mask=encoded["attention_mask"].to(device),
                    do_sample=True,
                    temperature=self.temperature,
                    max_new_tokens=self.max_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )
                new = output[0, input_ids.shape[1] :]
                texts.append(tokenizer.decode(new, skip_special_tokens=True))
        return texts


def trial_tokens(
    tokenizer, prompt: list[dict[str, str]], turns: list[dict[str, str]]
) -> tuple[list[int], list[int], list[int]]:
    """The token ids of a trial as trl trains on them.

    The chat template renders the dialogue after each turn; the text a turn adds is one
    segment: a reply with its end-of-turn marker (mask 1: trained) or a feedback turn with the
    next generation prompt (mask 0). The feedback on the last reply is not part of the trial.

    Args:
        tokenizer: the trainer's tokenizer (with its chat template).
        prompt: the trial's prompt messages.
        turns: the messages after the prompt: reply, feedback, reply, ... (a trailing
            feedback is dropped).

    Returns:
        (prompt ids, completion ids, env mask over the completion ids).

    Raises:
        ValueError: the chat template does not extend a rendering by appending to it.
    """
    if turns and turns[-1]["role"] != "assistant":
        turns = turns[:-1]

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    messages = [dict(m) for m in prompt]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids, completion, mask = encode(text), [], []
    for message in turns:
        messages.append(dict(message))
        trained = message["role"] == "assistant"
        rendered = tokenizer.apply_chat_template(
            messages, add_generation_prompt=not trained, tokenize=False
        )
        if not rendered.startswith(text):
            raise ValueError("the chat template does not render a dialogue turn by turn")
        ids = encode(rendered[len(text) :])
        completion += ids
        mask += [int(trained)] * len(ids)
        text = rendered
    return prompt_ids, completion, mask


def _key(prompt: list[dict[str, str]]) -> str:
    return json.dumps([[m.get("role"), m.get("content")] for m in prompt])
