"""pdserve's forward pass for the Llama family (Llama, Mistral, Qwen2).

One packed batch of variable-length prefill chunks and single-token decodes runs through
every layer together; only attention looks at request boundaries (``AttentionMetadata``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from common.model.attention import paged_attention
from common.model.attention_metadata import AttentionMetadata
from common.model.kv_cache import PagedKVCache
from common.model.config import ModelConfig, load_model_config
from common.model.rope import RotaryTable
from common.model.weights import LayerWeights, ModelWeights, load_weights

AttentionFn = Callable[..., torch.Tensor]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalises in float32 and casts back before scaling, as the reference models do."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


class LlamaModel:
    def __init__(self, config: ModelConfig, weights: ModelWeights, device: torch.device,
                 attention: AttentionFn = paged_attention) -> None:
        self.config = config
        self.weights = weights
        self.device = device
        self.dtype = weights.embed.dtype
        self.rotary = RotaryTable(config.rope, config.head_dim, config.max_position_embeddings, device)
        self.scale = config.head_dim**-0.5
        self.attention = attention

    @classmethod
    def load(cls, model_dir: str | Path, dtype: torch.dtype, device: torch.device) -> LlamaModel:
        config = load_model_config(model_dir)
        return cls(config, load_weights(model_dir, config, dtype, device), device)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: PagedKVCache,
                meta: AttentionMetadata, logits_rows: torch.Tensor) -> torch.Tensor:
        """Runs the packed batch and returns float32 logits for the rows in ``logits_rows``."""
        hidden = self.weights.embed[input_ids]
        rotary = self.rotary.lookup(positions, self.dtype)
        for index, layer in enumerate(self.weights.layers):
            hidden = self._layer(index, layer, hidden, rotary, cache, meta)
        hidden = rms_norm(hidden[logits_rows], self.weights.final_norm, self.config.rms_norm_eps)
        return F.linear(hidden, self.weights.lm_head).float()

    def _layer(self, index: int, w: LayerWeights, hidden: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
               cache: PagedKVCache, meta: AttentionMetadata) -> torch.Tensor:
        cfg = self.config
        x = rms_norm(hidden, w.input_norm, cfg.rms_norm_eps)
        q, k, v = F.linear(x, w.qkv, w.qkv_bias).split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        q = RotaryTable.apply(q.view(-1, cfg.num_heads, cfg.head_dim), *rotary)
        k = RotaryTable.apply(k.view(-1, cfg.num_kv_heads, cfg.head_dim), *rotary)
        v = v.view(-1, cfg.num_kv_heads, cfg.head_dim)
        attn = self.attention(q, k, v, cache, index, meta, self.scale, cfg.sliding_windows[index])
        hidden = hidden + F.linear(attn.flatten(1), w.o, w.o_bias)
        x = rms_norm(hidden, w.post_norm, cfg.rms_norm_eps)
        gate, up = F.linear(x, w.gate_up, w.gate_up_bias).chunk(2, dim=-1)
        return hidden + F.linear(F.silu(gate) * up, w.down, w.down_bias)
