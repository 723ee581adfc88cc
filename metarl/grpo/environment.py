"""The discovery task as a gym-style environment for language-model RL: the extension point for
multi-turn training.

    observation = env.reset()                   # the task prompt: chat messages
    while True:
        reply = policy(observation)             # the model writes a program
        step = env.step(reply)                  # the cascade's verdict
        observation = step.observation          # the dialogue with the evaluator's feedback
        if step.done: break                     # after `attempts` programs (a trial)

Each step's reward is `CascadeReward`'s, so single-turn GRPO (`train-proposer`, one attempt)
and multi-turn training (k attempts, the model reading each verdict as the conversation-mode
proposer does) optimise the same thing, and every program is archived the same way. This is the
MetaRLGym / verifiers shape; trl reaches it through `GRPOTrainer(rollout_func=...)` (a rollout
that plays a trial and returns its token ids: `ProposerTraining(rollout_func=)`) or through its
`environment_factory`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from metarl.discovery.proposers.llm import prompts
from metarl.evaluation.outcome import Outcome
from metarl.grpo.rewards import CascadeReward


@dataclass
class EnvStep:
    """What `DiscoveryEnv.step` returns."""

    observation: list[dict[str, str]]  # the whole dialogue so far, ending with the feedback
    reward: float | None  # None: the evaluator could not judge the program
    done: bool
    outcome: Outcome
    label: str  # the reward's verdict: no-program, static, ..., scored, excluded
    candidate_id: str | None = None


@dataclass
class DiscoveryEnv:
    """A trial of `attempts` programs for one of `rows`' prompts.

    Args:
        reward: the reward that judges (and archives) each program.
        rows: prompt rows (grpo.prompts.prompt_rows): chat `prompt` plus archive columns.
        attempts: programs per trial (1: single-turn).
        rng_seed: which prompt each reset draws.
    """

    reward: CascadeReward
    rows: list[dict]
    attempts: int = 1
    rng_seed: int = 0
    step_count: int = 0  # the trainer's step, recorded with each program
    _rng: random.Random = field(init=False, repr=False)
    _row: dict | None = field(default=None, init=False, repr=False)
    _dialogue: list[dict[str, str]] = field(default_factory=list, init=False, repr=False)
    _attempt: int = field(default=0, init=False, repr=False)
    _last: dict | None = field(default=None, init=False, repr=False)
    _best: dict | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.rows:
            raise ValueError("DiscoveryEnv needs at least one prompt row")
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        self._rng = random.Random(self.rng_seed)

    def reset(self, seed: int | None = None, row: dict | None = None) -> list[dict[str, str]]:
        """Start a trial: a prompt drawn from the rows (or `row`, when the trainer chose the
        prompt); its chat messages. `seed` (the environment protocol's name for an RNG seed)
        restarts the draws from it."""
        if seed is not None:
            self._rng = random.Random(seed)
        self._row = dict(row) if row is not None else self._rng.choice(self.rows)
        self._dialogue = [dict(m) for m in self._row["prompt"]]
        self._attempt = 0
        parents = json.loads(self._row.get("parent_ids") or "[]")
        self._last = {"id": parents[0], "name": parents[0], "fitness": None} if parents else None
        self._best = None
        return [dict(m) for m in self._dialogue]

    def step(self, reply: str) -> EnvStep:
        """Judge `reply` (one program); the feedback becomes the next user message.

        Raises:
            RuntimeError: step before reset, or after the trial is done.
        """
        self._check_open()
        self.reward.score([reply], self.columns(), self.step_count)
        return self.advance(self.reward.last_verdicts[0])

    def columns(self) -> dict[str, list]:
        """The archive columns of this trial's next program (its prompt is the dialogue so far),
        as `CascadeReward.score` takes them for a batch of one."""
        self._check_open()
        columns = {key: [value] for key, value in self._row.items() if key != "prompt"}
        return columns | {"prompt": [list(self._dialogue)]}

    def advance(self, verdict) -> EnvStep:
        """Take `verdict` (the reward's judgement of this trial's next reply, judged in a batch
        with other trials' replies) as the step: the feedback becomes the next user message.

        Raises:
            RuntimeError: before reset, or after the trial is done.
        """
        self._check_open()
        reply = verdict.reply
        self._attempt += 1
        done = self._attempt >= self.attempts
        self._dialogue.append({"role": "assistant", "content": reply})
        self._dialogue.append({"role": "user", "content": self._feedback(verdict, done)})
        return EnvStep(
            observation=[dict(m) for m in self._dialogue],
            reward=verdict.reward,
            done=done,
            outcome=verdict.outcome,
            label=verdict.label,
            candidate_id=verdict.candidate_id,
        )

    def _check_open(self) -> None:
        if self._row is None or self._attempt >= self.attempts:
            raise RuntimeError("call reset() before step(), and again after a trial is done")

    def _feedback(self, verdict, done: bool) -> str:
        task = self.reward.task
        if verdict.code is None:
            return prompts.unusable_reply_feedback(task, verdict.outcome.reason or "no program")
        outcome = verdict.outcome
        cid = verdict.candidate_id or f"attempt {self._attempt}"
        fitness = outcome.fitness if outcome.passed else None
        record = {"id": cid, "name": verdict.name, "fitness": fitness}
        if fitness is not None and (self._best is None or fitness > self._best["fitness"]):
            self._best = record
        text = prompts.feedback_text(
            outcome, verdict.name, cid, self._last, self._best, "your previous program"
        )
        self._last = record
        return text if done else text + "\n\n" + prompts.next_request(task)
