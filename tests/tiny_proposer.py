"""A proposer model small enough for CPU tests, built here (nothing is downloaded): a byte-level
BPE tokenizer trained on the task's prompts and seed programs, with a ChatML template, and a
~70k-parameter randomly initialised Llama.

A random model writes no program, so every group would have zero spread and GRPO would learn
nothing; the GRPO tests therefore feed trl a *scripted rollout* (trl's `rollout_func`): fixed
replies (a new valid program, a copy of a seed program, broken code, nothing) whose
log-probabilities the tiny model computes and GRPO moves, against the real reward. (Memorising
replies by fine-tuning does not carry over: measured here, a 2-layer model fine-tuned to 99.7%
token accuracy on one prompt wrote 0 parseable replies out of 24 for the run's real prompts.)"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from metarl.discovery.proposers.base import ParentInfo
from metarl.discovery.proposers.llm import prompts
from metarl.tasks import get_task

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<unk>", "<s>", "<|im_end|>", "<pad>", "<|im_start|>"]


def variant_source() -> str:
    """PPO-clip with epsilon 0.3: a valid drift that is not a seed program."""
    source = get_task("drift").seed_program("ppo_clip").source
    wide = source.replace(
        "1.0 - epsilon, 1.0 + epsilon", "1.0 - 1.5 * epsilon, 1.0 + 1.5 * epsilon"
    )
    assert wide != source
    return wide


def replies() -> list[str]:
    task = get_task("drift")
    seeds = {s.name: s.source for s in task.seed_programs()}
    return [
        json.dumps({"thought": "widen the clip", "name": "wide_clip", "code": variant_source()}),
        json.dumps({"thought": "the clipped objective", "name": "ppo", "code": seeds["ppo_clip"]}),
        json.dumps({"thought": "the closed form", "name": "lpo", "code": seeds["lpo"]}),
    ]


def build_tiny_proposer(path: Path) -> Path:
    """Build and save the tiny proposer in `path` (a transformers checkpoint)."""
    task = get_task("drift")
    seed = task.seed_program("ppo_clip")
    parent = ParentInfo(id="seed:ppo_clip", code=seed.source, name="ppo_clip")
    messages = [
        {"role": "system", "content": prompts.system_prompt(task)},
        {"role": "user", "content": prompts.rewrite_prompt(task, parent, [], None)},
    ]
    corpus = [m["content"] for m in messages] + replies()
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus * 3,
        trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=SPECIALS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<s>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    tokenizer.chat_template = CHATML
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def scripted_rollout(replies_in_order: list[str]):
    """trl's `rollout_func` answering every prompt with the next of `replies_in_order`
    (cycling); the trainer's tokenizer encodes prompts and replies."""
    state = {"next": 0}

    def rollout(prompts: list, trainer) -> dict:
        tokenizer = trainer.processing_class
        prompt_ids, completion_ids = [], []
        for prompt in prompts:
            text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            prompt_ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
            reply = replies_in_order[state["next"] % len(replies_in_order)]
            state["next"] += 1
            completion_ids.append(tokenizer(reply + tokenizer.eos_token)["input_ids"])
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    return rollout
