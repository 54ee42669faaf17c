"""Sizes of the embedded random-weight Llama models. ``tiny`` is the default everywhere."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelPreset:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    max_position_embeddings: int


PRESETS: dict[str, ModelPreset] = {
    "tiny": ModelPreset(256, 688, 4, 8, 4, 259, 4096),
    "small": ModelPreset(768, 2048, 12, 12, 4, 259, 4096),
    "1b": ModelPreset(2048, 8192, 16, 32, 8, 32000, 8192),
}
DEFAULT_PRESET = "tiny"
