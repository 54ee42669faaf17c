"""pdserve's forward pass for the Llama family (Llama, Mistral, Qwen2).

One packed batch of variable-length prefill chunks and single-token decodes runs through
every layer together; only attention looks at request boundaries (``AttentionMetadata``).
The residual stream is one tensor updated in place; each norm after the first adds the
previous block's output to it first (``ModelOps.add_rms_norm``), so the GPU path runs the add
and the norm as one kernel.
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
from common.model.ops import TORCH_OPS, ModelOps, Rotary
from common.model.packed_linear import ROW_GRAIN
from common.model.rope import RotaryTable
from common.model.weights import LayerWeights, ModelWeights, load_weights

AttentionFn = Callable[..., torch.Tensor]
MLP_TILE_BYTES = 4 << 20  # the gate/up output of one tile of rows, at most
LinearFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


class LlamaModel:
    def __init__(self, config: ModelConfig, weights: ModelWeights, device: torch.device,
                 attention: AttentionFn = paged_attention, ops: ModelOps = TORCH_OPS) -> None:
        self.config = config
        self.weights = weights
        self.device = device
        self.dtype = weights.embed.dtype
        self.rotary = RotaryTable(config.rope, config.head_dim, config.max_position_embeddings, device)
        self.scale = config.head_dim**-0.5
        self.attention = attention
        self.ops = ops
        self.linear: LinearFn = F.linear  # a CPU's fast step swaps in prepacked weights (``packed_linear``)
        self.mlp_tile_rows = mlp_tile_rows(config, self.dtype) if device.type == "cpu" else None

    @classmethod
    def load(cls, model_dir: str | Path, dtype: torch.dtype, device: torch.device) -> LlamaModel:
        config = load_model_config(model_dir)
        return cls(config, load_weights(model_dir, config, dtype, device), device)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: PagedKVCache,
                meta: AttentionMetadata, logits_rows: torch.Tensor | None) -> torch.Tensor:
        """Runs the packed batch and returns float32 logits for the rows in ``logits_rows`` (None: every row)."""
        residual = self.weights.embed[input_ids]  # a fresh tensor: the stream is updated in place
        rotary = self.ops.rotary(self.rotary, positions, self.dtype)
        delta: torch.Tensor | None = None
        for index, layer in enumerate(self.weights.layers):
            delta = self._layer(index, layer, residual, delta, rotary, cache, meta)
        assert delta is not None
        if logits_rows is not None:
            delta, residual = delta[logits_rows], residual[logits_rows]
        final = self.ops.add_rms_norm(delta, residual, self.weights.final_norm, self.config.rms_norm_eps)
        return self.linear(final, self.weights.lm_head, None).float()

    def _layer(self, index: int, w: LayerWeights, residual: torch.Tensor, delta: torch.Tensor | None,
               rotary: Rotary, cache: PagedKVCache, meta: AttentionMetadata) -> torch.Tensor:
        """Adds the previous layer's ``delta`` to ``residual`` and returns this layer's."""
        cfg, ops = self.config, self.ops
        if delta is None:
            x = ops.rms_norm(residual, w.input_norm, cfg.rms_norm_eps)
        else:
            x = ops.add_rms_norm(delta, residual, w.input_norm, cfg.rms_norm_eps)
        linear = self.linear
        q, k, v = linear(x, w.qkv, w.qkv_bias).split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        q, k = rotary.apply(q.view(-1, cfg.num_heads, cfg.head_dim), k.view(-1, cfg.num_kv_heads, cfg.head_dim))
        v = v.view(-1, cfg.num_kv_heads, cfg.head_dim)
        attn = self.attention(q, k, v, cache, index, meta, self.scale, cfg.sliding_windows[index])
        x = ops.add_rms_norm(linear(attn.flatten(1), w.o, w.o_bias), residual, w.post_norm, cfg.rms_norm_eps)
        return self._mlp(x, w)

    def _mlp(self, x: torch.Tensor, w: LayerWeights) -> torch.Tensor:
        """``down(silu(gate) · up)``; on a CPU, many rows go through in tiles of ``mlp_tile_rows``.

        A prefill's gate/up output is the largest tensor of a layer (rows × 2·intermediate). On a
        CPU, one that large is mapped fresh from the OS on every call and each of its pages is
        faulted in as it is first written, which cost more than the SiLU and the product on it;
        a tile's is small enough for the allocator to reuse, and stays in the caches."""
        linear, ops, rows = self.linear, self.ops, x.shape[0]
        if self.mlp_tile_rows is None or rows <= self.mlp_tile_rows:
            return linear(ops.silu_mul(linear(x, w.gate_up, w.gate_up_bias)), w.down, w.down_bias)
        tile = even_tile(rows, self.mlp_tile_rows)
        out = x.new_empty(rows, w.down.shape[0])
        for start in range(0, rows, tile):
            part = x[start:start + tile]
            out[start:start + tile] = linear(ops.silu_mul(linear(part, w.gate_up, w.gate_up_bias)), w.down, w.down_bias)
        return out

    def linear_weights(self) -> list[torch.Tensor]:
        """Every weight the forward multiplies by (``self.linear``'s second argument)."""
        return [*(t for w in self.weights.layers for t in (w.qkv, w.o, w.gate_up, w.down)), self.weights.lm_head]


def mlp_tile_rows(config: ModelConfig, dtype: torch.dtype) -> int:
    """Rows per MLP tile on a CPU: as many as keep the gate/up output within ``MLP_TILE_BYTES``, in
    whole ``ROW_GRAIN``s (a prefill-sized linear of other row counts runs on rows padded to one:
    a copy of its input, and of its output back)."""
    row_bytes = 2 * config.intermediate_size * torch.empty((), dtype=dtype).element_size()
    return max(ROW_GRAIN, MLP_TILE_BYTES // row_bytes // ROW_GRAIN * ROW_GRAIN)


def even_tile(rows: int, most: int) -> int:
    """Rows per tile for ``rows`` split into as few tiles of at most ``most`` (a multiple of
    ``ROW_GRAIN``) as can be, each the same whole number of grains but the last: 512 rows at most
    336 go as 256 + 256, not 336 + 176."""
    share = -(-rows // -(-rows // most))  # rows / tiles, rounded up
    return min(most, -(-share // ROW_GRAIN) * ROW_GRAIN)
