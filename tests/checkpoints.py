"""Small Hugging Face checkpoints of each supported architecture, written by transformers itself.

Weights are re-drawn with fan-in scaling (transformers' default 0.02 init gives nearly flat
logits, where float rounding could flip greedy choices and hide nothing of interest).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

from common.text.tokenizer_files import BOS_ID, EOS_ID, PAD_ID, write_tokenizer

ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
}
SMALL = dict(vocab_size=259, hidden_size=128, intermediate_size=320, num_hidden_layers=3,
             num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
             bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)


def write_checkpoint(out: Path, model_type: str, seed: int = 0, **overrides: Any) -> Path:
    config_cls, model_cls = ARCHS[model_type]
    config = config_cls(**{**SMALL, **overrides})
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    _rescale(model, seed)
    model.save_pretrained(out)
    write_tokenizer(out, config.vocab_size, config.max_position_embeddings)
    return out


@torch.no_grad()
def _rescale(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        noise = torch.randn(param.shape, generator=gen)
        if "norm" in name:
            param.copy_(1.0 + 0.1 * noise)
        elif name.endswith("bias"):
            param.copy_(0.5 * noise)
        elif "embed" in name:
            param.copy_(noise)
        else:
            gain = 4.0 if "lm_head" in name else 2.0 if any(p in name for p in ("q_proj", "k_proj")) else 1.0
            param.copy_(noise * gain / math.sqrt(param.shape[1]))


def reference_greedy(model_dir: Path, prompts: list[list[int]], max_tokens: list[int]) -> list[list[int]]:
    """transformers' own greedy ``generate()``, one prompt at a time, float32 on the CPU."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None  # compare full lengths, like ignore_eos
    outs = []
    for prompt, n in zip(prompts, max_tokens):
        ids = torch.tensor([prompt])
        full = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                           pad_token_id=PAD_ID)
        outs.append(full[0, len(prompt):].tolist())
    return outs


def random_prompts(lengths: list[int], seed: int = 0, vocab: int = 256) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
