"""``pdserve model create``: a model by name written into a directory, no network.

A packaged real model is converted from the GGUF file its package installed
(``common.model.packaged``). A random-weight preset is a deterministic Llama checkpoint:
weights are drawn from a seeded generator with scales chosen so that attention is sharp
and logits are well separated: greedy decoding then depends on the whole context, which
makes token-exactness tests meaningful, and near-ties that float rounding could flip are rare.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from common.model.presets import MODEL_NAMES, PACKAGED, PRESETS, ModelPreset
from common.text.tokenizer_files import BOS_ID, EOS_ID, PAD_ID, write_tokenizer

def create_model(preset: str, out_dir: Path, seed: int = 0) -> Path:
    if preset not in MODEL_NAMES:
        raise ValueError(f"preset must be one of {', '.join(MODEL_NAMES)}, got {preset!r}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Write into a sibling temp dir and rename, so a concurrent reader never sees half a model.
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        if preset in PACKAGED:
            from common.model.packaged import write_packaged

            write_packaged(PACKAGED[preset], staging)
        else:
            _write_random(PRESETS[preset], seed, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        os.replace(staging, out_dir)
    except OSError:  # out_dir exists and is not empty: another process won the race, or a re-create.
        _replace_dir(staging, out_dir)
    return out_dir


def _write_random(spec: ModelPreset, seed: int, staging: Path) -> None:
    save_file(_random_weights(spec, seed), str(staging / "model.safetensors"), metadata={"format": "pt"})
    (staging / "config.json").write_text(json.dumps(_hf_config(spec), indent=2))
    (staging / "generation_config.json").write_text(
        json.dumps({"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}, indent=2)
    )
    write_tokenizer(staging, spec.vocab_size, spec.max_position_embeddings)


def _replace_dir(staging: Path, out_dir: Path) -> None:
    for item in staging.iterdir():
        os.replace(item, out_dir / item.name)
    staging.rmdir()


def _hf_config(spec: ModelPreset) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.hidden_size // spec.num_heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "torch_dtype": "float32",
    }


def _random_weights(spec: ModelPreset, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    hidden, head_dim = spec.hidden_size, spec.hidden_size // spec.num_heads

    def normal(rows: int, cols: int, scale: float) -> torch.Tensor:
        return torch.randn(rows, cols, generator=gen) * (scale / math.sqrt(cols))

    weights = {"model.embed_tokens.weight": torch.randn(spec.vocab_size, hidden, generator=gen)}
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        weights[p + "self_attn.q_proj.weight"] = normal(spec.num_heads * head_dim, hidden, 2.0)
        weights[p + "self_attn.k_proj.weight"] = normal(spec.num_kv_heads * head_dim, hidden, 2.0)
        weights[p + "self_attn.v_proj.weight"] = normal(spec.num_kv_heads * head_dim, hidden, 1.0)
        weights[p + "self_attn.o_proj.weight"] = normal(hidden, spec.num_heads * head_dim, 1.0)
        weights[p + "mlp.gate_proj.weight"] = normal(spec.intermediate_size, hidden, 1.0)
        weights[p + "mlp.up_proj.weight"] = normal(spec.intermediate_size, hidden, 1.0)
        weights[p + "mlp.down_proj.weight"] = normal(hidden, spec.intermediate_size, 1.0)
        weights[p + "input_layernorm.weight"] = 1.0 + 0.1 * torch.randn(hidden, generator=gen)
        weights[p + "post_attention_layernorm.weight"] = 1.0 + 0.1 * torch.randn(hidden, generator=gen)
    weights["model.norm.weight"] = torch.ones(hidden)
    weights["lm_head.weight"] = normal(spec.vocab_size, hidden, 4.0)
    return {name: t.contiguous() for name, t in weights.items()}


if __name__ == "__main__":  # what ``common.model.location.ensure_model`` runs to write a preset on first use
    import argparse

    parser = argparse.ArgumentParser(description="write an embedded preset's checkpoint")
    parser.add_argument("--preset", choices=tuple(MODEL_NAMES), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    create_model(args.preset, args.out, seed=args.seed)
