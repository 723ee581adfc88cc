"""The supervised warm start before GRPO (trl's `SFTTrainer`): a few steps on the seed programs
and the archive's passing candidates written in the proposer's reply format.

Why: measured here with SmolLM2-135M and no warm start, every completion was truncated or
unparseable, every reward equal, every group of zero spread, and GRPO's loss and gradient
exactly 0. A short supervised pass teaches the format (a JSON reply whose code defines the
contracted function) so that the first groups already have spread to learn from. The adapter is
trained with LoRA like GRPO's, then merged, so GRPO starts a fresh adapter on the warm model.
"""

from __future__ import annotations

import logging
from pathlib import Path

from datasets import Dataset
from transformers import PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase
from trl import SFTConfig, SFTTrainer

from metarl.grpo.model import device_kind, lora_config, merged

logger = logging.getLogger(__name__)


def warm_start(
    network: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[dict],
    *,
    steps: int,
    lr: float,
    lora_rank: int,
    output_dir: Path,
    rng_seed: int,
) -> PreTrainedModel:
    """`steps` supervised steps (completion-only loss) on `rows`; the merged model.

    Args:
        network, tokenizer: the base proposer.
        rows: trl prompt-completion rows (grpo.prompts.sft_rows).
        steps: optimiser steps (batch of one).
        lr: the LoRA learning rate.
        lora_rank: the adapter's rank.
        output_dir: trl's scratch directory (nothing is kept there).
        rng_seed: the data order's and the adapter's RNG seed.

    Returns:
        The warm-started model with the adapter merged.
    """
    if not rows or steps <= 0:
        return network
    args = SFTConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        learning_rate=lr,
        per_device_train_batch_size=1,
        max_length=None,  # prompts are long; never cut the reply away
        use_cpu=device_kind() == "cpu",
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=max(1, steps // 5),
        save_strategy="no",
        report_to="none",
        seed=rng_seed,  # trl's name
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=network,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora_config(lora_rank),
    )
    result = trainer.train()
    logger.info("supervised warm start: %d steps, loss %.3f", steps, result.training_loss)
    return merged(trainer.model)
