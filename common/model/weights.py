"""Loading a Hugging Face Llama-family checkpoint (safetensors) into pdserve's fused layout.

q/k/v projections are stacked into one matrix and gate/up into another, so a layer runs
four matmuls instead of seven.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from common.model.config import ModelConfig


@dataclass(slots=True)
class LayerWeights:
    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None


@dataclass(slots=True)
class ModelWeights:
    embed: torch.Tensor
    layers: list[LayerWeights]
    final_norm: torch.Tensor
    lm_head: torch.Tensor


def load_weights(model_dir: str | Path, config: ModelConfig, dtype: torch.dtype, device: torch.device) -> ModelWeights:
    raw = _read_safetensors(Path(model_dir))

    def take(name: str) -> torch.Tensor:
        if name not in raw:
            raise ValueError(f"checkpoint in {model_dir} has no tensor {name!r}")
        return raw[name].to(device=device, dtype=dtype)

    def maybe(name: str) -> torch.Tensor | None:
        return take(name) if name in raw else None

    layers = [_layer(f"model.layers.{i}.", take, maybe) for i in range(config.num_layers)]
    embed = take("model.embed_tokens.weight")
    lm_head = embed if config.tie_word_embeddings or "lm_head.weight" not in raw else take("lm_head.weight")
    return ModelWeights(embed=embed, layers=layers, final_norm=take("model.norm.weight"), lm_head=lm_head)


def _layer(prefix: str, take, maybe) -> LayerWeights:  # type: ignore[no-untyped-def]
    attn, mlp = prefix + "self_attn.", prefix + "mlp."
    return LayerWeights(
        input_norm=take(prefix + "input_layernorm.weight"),
        qkv=torch.cat([take(attn + f"{p}_proj.weight") for p in "qkv"]),
        qkv_bias=_cat_optional([maybe(attn + f"{p}_proj.bias") for p in "qkv"]),
        o=take(attn + "o_proj.weight"),
        o_bias=maybe(attn + "o_proj.bias"),
        post_norm=take(prefix + "post_attention_layernorm.weight"),
        gate_up=torch.cat([take(mlp + "gate_proj.weight"), take(mlp + "up_proj.weight")]),
        gate_up_bias=_cat_optional([maybe(mlp + "gate_proj.bias"), maybe(mlp + "up_proj.bias")]),
        down=take(mlp + "down_proj.weight"),
        down_bias=maybe(mlp + "down_proj.bias"),
    )


def _cat_optional(parts: list[torch.Tensor | None]) -> torch.Tensor | None:
    if all(p is None for p in parts):
        return None
    if any(p is None for p in parts):
        raise ValueError("checkpoint has biases on some of q/k/v (or gate/up) but not all")
    return torch.cat(parts)  # type: ignore[arg-type]


def _read_safetensors(model_dir: Path) -> dict[str, torch.Tensor]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = [p.name for p in sorted(model_dir.glob("*.safetensors"))]
    if not files:
        raise FileNotFoundError(f"no .safetensors files in {model_dir}")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        with safe_open(str(model_dir / name), framework="pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
    return tensors
