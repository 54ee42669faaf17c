"""The Llama-family architecture as pdserve reads it from a Hugging Face ``config.json``.

Llama, Mistral and Qwen2 share one layout; they differ only in the fields parsed here
(qkv bias, sliding window, RoPE scaling, tied embeddings).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")


@dataclass(frozen=True, slots=True)
class RopeConfig:
    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.rope_type not in ("default", "linear", "llama3"):
            raise ValueError(f"rope_type {self.rope_type!r} is not supported (default, linear, llama3)")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope: RopeConfig
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    # One entry per layer: the attention window in tokens, or None for full attention.
    sliding_windows: tuple[int | None, ...] = field(default_factory=tuple)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if len(self.sliding_windows) != self.num_layers:
            raise ValueError("sliding_windows needs one entry per layer")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def load_model_config(model_dir: str | Path) -> ModelConfig:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: --model must be a Hugging Face checkpoint directory")
    raw = json.loads(path.read_text())
    generation = Path(model_dir) / "generation_config.json"
    if generation.is_file():
        # the ids generation stops at (an instruct model's end-of-turn) live here, beside config.json's
        ends = _as_tuple(json.loads(generation.read_text()).get("eos_token_id"))
        raw = {**raw, "eos_token_id": list(dict.fromkeys((*ends, *_as_tuple(raw.get("eos_token_id")))))}
    return parse_model_config(raw)


def parse_model_config(raw: dict[str, Any]) -> ModelConfig:
    model_type = raw.get("model_type", "llama")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model_type {model_type!r} is not supported ({', '.join(SUPPORTED_MODEL_TYPES)})")
    heads = raw["num_attention_heads"]
    hidden = raw["hidden_size"]
    layers = raw["num_hidden_layers"]
    return ModelConfig(
        model_type=model_type,
        vocab_size=raw["vocab_size"],
        hidden_size=hidden,
        intermediate_size=raw["intermediate_size"],
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads,
        head_dim=raw.get("head_dim") or hidden // heads,
        max_position_embeddings=raw.get("max_position_embeddings", 2048),
        rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        rope=_parse_rope(raw),
        qkv_bias=model_type == "qwen2" or bool(raw.get("attention_bias", False)),
        o_bias=model_type != "qwen2" and bool(raw.get("attention_bias", False)),
        mlp_bias=bool(raw.get("mlp_bias", False)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        sliding_windows=_parse_sliding_windows(raw, model_type, layers),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=_as_tuple(raw.get("eos_token_id")),
    )


def _as_tuple(value: int | list[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, list) else (value,)


def _parse_rope(raw: dict[str, Any]) -> RopeConfig:
    # transformers 5 writes ``rope_parameters`` (theta inside); older checkpoints write
    # ``rope_theta`` and an optional ``rope_scaling``.
    params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    rope_type = params.get("rope_type", params.get("type", "default"))
    return RopeConfig(
        theta=float(theta),
        rope_type=rope_type,
        factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(params.get("original_max_position_embeddings", 8192)),
    )


def _parse_sliding_windows(raw: dict[str, Any], model_type: str, layers: int) -> tuple[int | None, ...]:
    window = raw.get("sliding_window")
    if model_type == "qwen2" and not raw.get("use_sliding_window", False):
        window = None
    if window is None:
        return (None,) * layers
    layer_types = raw.get("layer_types")
    if layer_types:
        return tuple(window if kind == "sliding_attention" else None for kind in layer_types)
    if model_type == "qwen2":
        first_full = raw.get("max_window_layers", layers)
        return tuple(window if i >= first_full else None for i in range(layers))
    return (window,) * layers
