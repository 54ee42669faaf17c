"""Rotary position embeddings, including Llama 3's frequency-dependent scaling."""

from __future__ import annotations

import math

import torch

from common.model.config import RopeConfig


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (rope.theta**exponents)
    if rope.rope_type == "linear":
        return inv_freq / rope.factor
    if rope.rope_type == "llama3":
        return _llama3_scale(inv_freq, rope)
    return inv_freq


def _llama3_scale(inv_freq: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    """Long wavelengths are divided by ``factor``, short ones kept, the band between blended."""
    wavelength = 2 * math.pi / inv_freq
    long_cutoff = rope.original_max_position_embeddings / rope.low_freq_factor
    short_cutoff = rope.original_max_position_embeddings / rope.high_freq_factor
    scaled = torch.where(wavelength > long_cutoff, inv_freq / rope.factor, inv_freq)
    blend = (rope.original_max_position_embeddings / wavelength - rope.low_freq_factor) / (
        rope.high_freq_factor - rope.low_freq_factor
    )
    blended = (1 - blend) * scaled / rope.factor + blend * scaled
    in_band = (wavelength >= short_cutoff) & (wavelength <= long_cutoff)
    return torch.where(in_band, blended, scaled)


class RotaryTable:
    """cos/sin for every position up to ``max_positions``, computed once in float32."""

    def __init__(self, rope: RopeConfig, head_dim: int, max_positions: int, device: torch.device) -> None:
        inv_freq = inverse_frequencies(rope, head_dim)
        positions = torch.arange(max_positions, dtype=torch.float32)
        angles = positions[:, None] * inv_freq[None, :]
        doubled = torch.cat([angles, angles], dim=-1)
        self.cos = doubled.cos().to(device)
        self.sin = doubled.sin().to(device)

    def lookup(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin ``[tokens, 1, head_dim]`` for a batch, looked up once per forward."""
        return self.cos[positions].unsqueeze(1).to(dtype), self.sin[positions].unsqueeze(1).to(dtype)

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` of shape ``[tokens, heads, head_dim]`` by each token's position."""
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin
