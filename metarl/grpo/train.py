"""`train_proposer`: GRPO on the proposer model, its reward the sandboxed evaluation.

    plan prompts (an archive's discover run)  ─►  measure the base model on held-out prompts
      ─►  supervised warm start (SFTTrainer, LoRA merged)  ─►  measure again
      ─►  GRPOTrainer (LoRA; generation by transformers on CPU, vllm on a GPU), the reward
          CascadeReward: every completion extracted, scored by the cascade, archived
      ─►  merged checkpoint `final/`  ─►  measure the trained model

A run is an archive run with `method = grpo`: every completion the trainer samples (and every
measurement's) is a candidate with the model step and checkpoint that wrote it in `meta`, so
the run's finds sit on the leaderboard beside discover's. The run's `state` holds the phase,
the planned prompts and the measurements; trl's checkpoints (adapter, optimiser, scheduler,
RNG; one every `save_every` steps) hold the rest, so `--resume` continues from the last saved
step. Nothing here writes a policy-gradient loop: trl's trainers are used as they are.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from datasets import Dataset
from transformers import PreTrainedModel
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig

from metarl.archives.keys import eval_settings_key
from metarl.archives.reuse import Scored, archived_score
from metarl.archives.rows import candidate_row
from metarl.archives.runs import INTERRUPTED, RunSession, RunSpec, open_run
from metarl.archives.store import Archive, ArchiveError, decode_outcome
from metarl.evaluation.cascade import Evaluator
from metarl.grpo import prompts as prompt_plan
from metarl.grpo.export import read_sft_rows
from metarl.grpo.measure import ProposerScore, measure_proposer
from metarl.grpo.model import (
    device_kind,
    load_proposer,
    lora_config,
    model_location,
    model_name,
    save_checkpoint,
)
from metarl.grpo.progress import StepProgress
from metarl.grpo.rewards import CascadeReward, Verdict, reward_of
from metarl.grpo.settings import GRPOSettings, TrainError
from metarl.grpo.sft import warm_start
from metarl.grpo.trainer import ProposerTrainer
from metarl.grpo.trials import Generate, TrialReward, TrialRollout
from metarl.platform import device_description, evaluation_identity
from metarl.tasks import get_task

logger = logging.getLogger(__name__)

METHOD = "grpo"


@dataclass
class TrainState:
    """What a resumed run needs besides trl's checkpoints; stored in the run's `state`."""

    phase: str = "before"
    step: int = 0
    elapsed_s: float = 0.0
    prompts: dict | None = None  # the PromptPlan
    scores: dict = field(default_factory=dict)  # measurement label -> ProposerScore dict
    groups: int = 0
    zero_spread: int = 0
    resampled: int = 0  # generation batches generated again for lack of reward spread
    checkpoint: str | None = None  # the final merged checkpoint
    steps: list = field(default_factory=list)  # per step: reward, pass rates, timing split

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "TrainState":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass
class TrainResult:
    run_id: str
    status: str  # finished, stopped, interrupted
    reason: str
    step: int
    scores: list[ProposerScore]
    checkpoint: str | None
    groups: int
    zero_spread: int
    resampled: int  # generation batches generated again for lack of reward spread
    output_dir: str


class ProposerTraining:
    """One `train-proposer` run (new or resumed).

    Args:
        settings: the run's options (resolved).
        archive: the archive (prompt source, and where the run and its completions go).
        resume: a GRPO run id to continue, or None.
        on_event: `on_event(kind, data)` for the display: "status" {"text"}, "step" StepReport,
            "score" ProposerScore.
        evaluator_factory: builds the cascade from CascadeSettings.
        rollout_func: trl's own extension point for generation (`GRPOTrainer(rollout_func=)`:
            prompts -> prompt ids, completion ids, log-probabilities), e.g. a multi-turn
            rollout through `grpo.environment.DiscoveryEnv`; None: trl generates (transformers
            on a CPU, vllm with `use_vllm`).
        generate: with `attempts` > 1, how each turn of a trial is written
            (`grpo.trials.Generate`); None samples from the model being trained.
    """

    def __init__(
        self,
        settings: GRPOSettings,
        archive: Archive,
        resume: str | None = None,
        on_event: Callable[[str, Any], None] | None = None,
        evaluator_factory: Callable = Evaluator,
        rollout_func: Callable | None = None,
        generate: Generate | None = None,
    ):
        self.settings = settings
        self.archive = archive
        self.resume_id = resume
        self.on_event = on_event or (lambda kind, data: None)
        self.evaluator_factory = evaluator_factory
        self.rollout_func = rollout_func
        self.generate = generate
        self.task = get_task(settings.task)
        self.cascade = settings.cascade_settings()
        self.versions = evaluation_identity()  # what its evaluation keys are built on
        self.device = device_description()
        self.name = model_name(settings.model)
        self.run_id: str | None = None
        self.state = TrainState()
        self.output_dir = Path(settings.output_dir) if settings.output_dir else None
        self._started = time.monotonic()
        self._elapsed_base = 0.0

    # -- the run record -----------------------------------------------------------------------
    def elapsed(self) -> float:
        return self._elapsed_base + time.monotonic() - self._started

    def _open(self) -> RunSession:
        """Create the run, or take over stored run `resume_id` (its output folder and state).

        Raises:
            TrainError: the stored run was started with other training options.
            ArchiveError: no such run, or not a GRPO run.
            LiveRun: the run is still running.
        """

        def check(run: dict) -> None:
            stored = GRPOSettings.stored(run.get("config"))
            self.output_dir = Path(stored.output_dir)
            self.settings.output_dir = stored.output_dir
            if stored.hash() != self.settings.hash():
                raise TrainError(f"run {run['id']} was started with other training options")

        spec = RunSpec(
            method=METHOD,
            task=self.settings.task,
            suite=self.settings.suite,
            config=self.settings.to_dict(),
            config_hash=self.settings.hash(),
            versions=self.versions,
            device=self.device,
            proposer=f"grpo:{self.name}",
            mode=METHOD,
            rng_seed=self.settings.rng_seed,
            state=self.state.to_dict(),
            changeable={"max_time_s": self.settings.max_time},
        )
        session = open_run(self.archive, spec, resume=self.resume_id, check=check)
        session.final = self._final_columns
        self.run_id = session.run_id
        if session.resumed:
            self.state = TrainState.from_dict(session.row.get("state"))
            self._elapsed_base = self.state.elapsed_s
        elif self.output_dir is None:
            self.output_dir = Path("proposers") / self.run_id
            self.settings.output_dir = str(self.output_dir)
            session.save(config=self.settings.to_dict())
        return session

    def _save(self, **run_fields) -> None:
        self.state.elapsed_s = self.elapsed()
        self.archive.update_run(
            self.run_id,
            state=self.state.to_dict(),
            generation=self.state.step,
            elapsed_s=self.state.elapsed_s,
            **run_fields,
        )

    def _final_columns(self) -> dict:
        """The columns written with the run's end: its time and state."""
        self.state.elapsed_s = self.elapsed()
        return {"elapsed_s": self.state.elapsed_s, "state": self.state.to_dict()}

    # -- archiving completions ------------------------------------------------------------------
    def checkpoint_of(self, step: int, phase: str = "train") -> str:
        """The checkpoint holding the model that wrote a completion: the base model, the warm
        start, trl's checkpoint after `step` optimiser steps, or the final merged one."""
        if phase == "base":
            return self.settings.model
        if phase == "sft" or (phase == "train" and step == 0 and self.settings.sft_steps):
            return str(self.output_dir / "sft")
        if phase == "trained":
            return str(self.output_dir / "final")
        if phase.startswith("eval:"):
            return phase[len("eval:") :]
        if step == 0:
            return self.settings.model
        return str(self.output_dir / "grpo" / f"checkpoint-{step}")

    def record(self, verdicts: list[Verdict], columns: dict[str, list], step: int, phase: str):
        """Archive a reward call's completions (the reward's recorder): one candidate each, with
        its reply as an LLM call, its step, checkpoint, phase, prompt and reward in `meta`."""
        checkpoint = self.checkpoint_of(step, phase)
        first_seq = self.archive.child_count(self.run_id) + 1
        best = self.archive.get_run(self.run_id).get("best_fitness")
        for index, verdict in enumerate(verdicts):
            column = {key: values[index] for key, values in columns.items() if index < len(values)}
            row = candidate_row(
                run_id=self.run_id,
                seq=first_seq + index,
                task=self.task.name,
                method=METHOD,
                code=verdict.code,
                settings=self.cascade,
                total_timesteps=self.settings.timesteps,
                versions=self.versions,
                device=self.device,
                name=verdict.name or f"grpo-s{step}",
                thought=verdict.thought,
                parent_ids=json.loads(column.get("parent_ids") or "[]"),
                generation=step,
                proposer=f"grpo:{self.name}",
                operator=column.get("operator") or "grpo",
                meta={
                    "step": step,
                    "checkpoint": checkpoint,
                    "phase": phase,
                    "prompt": column.get("prompt_id"),
                    "reward": verdict.reward,
                    "verdict": verdict.label,
                },
            )
            row["cached_from"] = verdict.reused_from
            call = {
                "model": f"grpo:{self.name}",
                "prompt": column.get("prompt"),
                "reply": verdict.reply,
                "completion_tokens": column.get("completion_tokens"),
            }
            update = {"candidates_count": True}
            outcome = verdict.outcome
            if outcome.passed and outcome.fitness is not None and verdict.reused_from is None:
                if best is None or outcome.fitness > best:
                    best = outcome.fitness
                    update |= {"best_id": row["id"], "best_fitness": best}
            self.archive.record_candidate(row, outcome, calls=[call], run_update=update)
            verdict.candidate_id = row["id"]

    def archived(self, code: str) -> Scored | None:
        """The archive's earlier evaluation of `code` under this run's evaluation key (another
        run's or method's), or None: the reward's `archived` lookup."""
        key = eval_settings_key(self.task.name, self.cascade, self.versions)
        return archived_score(self.archive, code, key, exclude_run=self.run_id)

    def archived_verdicts(self) -> list[Verdict]:
        """The verdicts on this run's programs scored so far (none for a new run)."""
        verdicts = []
        for row in self.archive.run_candidates(self.run_id):
            outcome = decode_outcome(row)
            if row["code"] and outcome is not None and row["cached_from"] is None:
                value, label = reward_of(outcome)
                verdicts.append(
                    Verdict("", row["code"], outcome, value, label, candidate_id=row["id"])
                )
        return verdicts

    # -- the phases -------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        """Run (or resume) the training; returns how this session ended.

        Raises:
            TrainError: the run cannot start (mismatched resume, no prompts).
            ModelLoadError: the model cannot be loaded.
            ArchiveError: no such run to resume, or not a GRPO run.
            LiveRun: the run to resume is still running.
        """
        model_location(self.settings.model)  # a missing model fails before any run exists
        with self._open() as session:  # heartbeat and log; an escaping error ends it as failed
            try:
                status, reason = self._phases()
            except KeyboardInterrupt:
                status, reason = "interrupted", INTERRUPTED
            session.finish(status, reason)
        return self.result(status, reason)

    def _phases(self) -> tuple[str, str]:
        """The phases still to do (see the module docstring); (status, reason) of the end."""
        evaluator = None
        try:
            plan = self._plan()
            self.emit("status", f"loading {self.settings.model}")
            network, tokenizer = load_proposer(self._start_model())
            evaluator = self.evaluator_factory(
                self.cascade,
                workers=self.settings.workers,
                executor=self.settings.executor_settings(),
            )
            reward = CascadeReward(
                evaluator,
                self.task,
                prompt_plan.known_programs(self.archive, self.task, plan),
                self.settings.generations,
                record=self.record,
                archived=self.archived,
            )
            reward.remember(self.archived_verdicts())
            heldout = prompt_plan.prompt_rows(self.archive, self.task, plan.heldout)
            if self.state.phase == "before":
                self._measure("base", network, tokenizer, heldout, reward)
                self.state.phase = "sft"
                self._save()
            if self.state.phase == "sft":
                if self.settings.sft_steps:
                    network = self._warm_start(network, tokenizer, plan)
                    self._measure("sft", network, tokenizer, heldout, reward)
                self.state.phase = "grpo"
                self._save()
            if self.state.phase == "grpo":
                status, reason, network = self._grpo(network, tokenizer, plan, reward)
                if status != "finished":
                    return status, reason
                final = save_checkpoint(network, tokenizer, self.output_dir / "final")
                self.state.checkpoint = str(final)
                self.state.phase = "after"
                self._save()
            if self.state.phase == "after":
                self._measure("trained", network, tokenizer, heldout, reward, self.state.step)
                self.state.phase = "done"
                self._save()
        finally:
            if evaluator is not None:
                evaluator.close()
        return "finished", "steps done"

    def _plan(self) -> prompt_plan.PromptPlan:
        if self.state.prompts is None:
            try:
                plan = prompt_plan.plan_prompts(
                    self.archive,
                    self.task,
                    self.settings.source_run,
                    self.settings.heldout_prompts,
                    self.settings.rng_seed,
                )
            except ArchiveError as error:
                raise TrainError(error.message, hint=error.hint) from None
            self.state.prompts = plan.to_dict()
            self._save()
            source = plan.source_run or f"the {self.task.name} seed programs"
            logger.info(
                "prompts from %s: %d to train on, %d held out",
                source,
                len(plan.train),
                len(plan.heldout),
            )
        return prompt_plan.PromptPlan.from_dict(self.state.prompts)

    def _start_model(self) -> str:
        """The model a (resumed) session starts from: the trained checkpoint once it exists,
        else the warm-started one once that exists, else the base model."""
        if self.state.phase in ("after", "done") and self.state.checkpoint:
            return self.state.checkpoint
        sft = self.output_dir / "sft"
        if self.state.phase == "grpo" and self.settings.sft_steps and sft.exists():
            return str(sft)
        return self.settings.model

    def _measure(self, label, network, tokenizer, rows, reward, step: int = 0) -> None:
        if not rows:
            return
        self.emit("status", f"measuring the {label} model on {len(rows)} held-out prompts")
        score = measure_proposer(
            network,
            tokenizer,
            rows,
            reward,
            label=label,
            completions=self.settings.generations,
            max_tokens=self.settings.max_completion_tokens,
            temperature=self.settings.temperature,
            rng_seed=self.settings.rng_seed,
            step=step,
        )
        self.state.scores[label] = score.to_dict()
        self._save()
        self.on_event("score", score)

    def _warm_start(self, network, tokenizer, plan) -> PreTrainedModel:
        if self.settings.sft_data:  # a `metarl export RUN --format sft` file
            rows = read_sft_rows(self.settings.sft_data)
        else:
            rows = prompt_plan.sft_rows(self.archive, self.task, plan)
        steps = self.settings.sft_steps
        self.emit("status", f"supervised warm start: {steps} steps on {len(rows)} pairs")
        network = warm_start(
            network,
            tokenizer,
            rows,
            steps=self.settings.sft_steps,
            lr=self.settings.sft_lr,
            lora_rank=self.settings.lora_rank,
            output_dir=self.output_dir / "sft-scratch",
            rng_seed=self.settings.rng_seed,
        )
        save_checkpoint(network, tokenizer, self.output_dir / "sft")
        return network

    def _grpo(self, network, tokenizer, plan, reward) -> tuple[str, str, Any]:
        """trl's GRPOTrainer until `steps` (or the time budget); (status, reason, model)."""
        settings = self.settings
        rows = prompt_plan.prompt_rows(self.archive, self.task, plan.train)
        batch = settings.generations * settings.prompts_per_step
        config = GRPOConfig(
            output_dir=str(self.output_dir / "grpo"),
            max_steps=settings.steps,
            learning_rate=settings.lr,
            beta=settings.beta,
            num_generations=settings.generations,
            # one generation batch (every group of the step) per optimiser step, trained in
            # micro-batches: one reward call, one batched evaluation, bounded memory
            per_device_train_batch_size=settings.micro_batch,
            gradient_accumulation_steps=batch // settings.micro_batch,
            max_completion_length=settings.max_completion_tokens,
            temperature=settings.temperature,
            use_cpu=device_kind() == "cpu",
            bf16=False,
            gradient_checkpointing=device_kind() == "cuda",  # trl's GPU default; off on a CPU
            logging_steps=1,
            save_strategy="steps",
            save_steps=settings.save_every,
            report_to="none",
            seed=settings.rng_seed,
            disable_tqdm=True,
            use_vllm=settings.use_vllm,
            vllm_mode=settings.vllm_mode,
            vllm_server_base_url=settings.vllm_server_url,
        )
        progress = StepProgress(self, reward)
        rollout, reward_funcs = self.rollout_func, reward
        if settings.attempts > 1:  # trials of k programs (grpo/trials.py)
            rollout = TrialRollout(
                reward,
                rows,
                settings.attempts,
                settings.trial_reward,
                settings.trial_discount,
                settings.max_completion_tokens,
                settings.temperature,
                generate=self.generate,
            )
            reward_funcs = TrialReward()
        trainer = ProposerTrainer(
            model=network,
            reward_funcs=reward_funcs,
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=lora_config(settings.lora_rank),
            callbacks=[progress],
            rollout_func=rollout,
            loss=settings.loss,
            resample=settings.resample,
        )
        progress.trainer = trainer
        last = get_last_checkpoint(config.output_dir) if Path(config.output_dir).exists() else None
        self.emit("status", f"GRPO from step {self.state.step}" + (f" ({last})" if last else ""))
        trainer.train(resume_from_checkpoint=last)
        self.state.step = trainer.state.global_step
        self._save()
        if progress.stopped:
            return "stopped", progress.stopped, None
        return "finished", "steps done", trainer.model

    def emit(self, kind: str, text: str) -> None:
        logger.info("%s", text)
        self.on_event(kind, {"text": text})

    def result(self, status: str, reason: str) -> TrainResult:
        return TrainResult(
            run_id=self.run_id,
            status=status,
            reason=reason,
            step=self.state.step,
            scores=[ProposerScore.from_dict(s) for s in self.state.scores.values()],
            checkpoint=self.state.checkpoint,
            groups=self.state.groups,
            zero_spread=self.state.zero_spread,
            resampled=self.state.resampled,
            output_dir=str(self.output_dir),
        )


def evaluate_proposers(
    archive: Archive,
    run_id: str,
    models: list[str],
    completions: int | None = None,
    on_event: Callable[[str, Any], None] | None = None,
    evaluator_factory: Callable = Evaluator,
) -> list[ProposerScore]:
    """Measure each model on GRPO run `run_id`'s held-out prompts, as the run measured its own
    (same prompts, sampling seeds, reward and settings); the completions are archived in the
    run with phase `eval:MODEL`.

    Args:
        archive: the archive holding the run.
        run_id: a GRPO run.
        models: checkpoints to measure (a directory, a .gguf, "smollm2").
        completions: replies per prompt (default: the run's group size).
        on_event: as ProposerTraining's ("status", "score").
        evaluator_factory: builds the cascade.

    Returns:
        One ProposerScore per model, in order.

    Raises:
        TrainError: `run_id` is not a GRPO run, or it has no held-out prompts.
        ModelLoadError: a model cannot be loaded.
    """
    run = archive.get_run(run_id)
    if (run.get("method") or "discovery") != METHOD:
        raise TrainError(f"run {run_id} is a {run.get('method')} run, not a GRPO run")
    settings = GRPOSettings.stored(run.get("config"))
    state = TrainState.from_dict(run.get("state"))
    if not state.prompts or not state.prompts.get("heldout"):
        raise TrainError(f"run {run_id} has no held-out prompts (--heldout-prompts 0?)")
    training = ProposerTraining(settings, archive, on_event=on_event)
    training.run_id, training.output_dir = run_id, Path(settings.output_dir)
    plan = prompt_plan.PromptPlan.from_dict(state.prompts)
    rows = prompt_plan.prompt_rows(archive, training.task, plan.heldout)
    scores = []
    evaluator = evaluator_factory(
        training.cascade,
        workers=training.settings.workers,
        executor=training.settings.executor_settings(),
    )
    try:
        reward = CascadeReward(
            evaluator,
            training.task,
            prompt_plan.known_programs(archive, training.task, plan),
            settings.generations,
            record=training.record,
            archived=training.archived,
        )
        for model in models:
            training.emit("status", f"measuring {model}")
            network, tokenizer = load_proposer(model)
            score = measure_proposer(
                network,
                tokenizer,
                rows,
                reward,
                label=f"eval:{model}",
                completions=completions or settings.generations,
                max_tokens=settings.max_completion_tokens,
                temperature=settings.temperature,
                rng_seed=settings.rng_seed,
            )
            scores.append(score)
            training.on_event("score", score)
    finally:
        evaluator.close()
    return scores
