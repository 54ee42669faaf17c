"""A CPU prefill's MLP in tiles of rows: as few tiles as fit, in whole row grains, the same result."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from common.model.llama import LlamaModel, even_tile
from common.model.ops import TORCH_OPS
from common.model.packed_linear import ROW_GRAIN


@pytest.mark.parametrize("most", [ROW_GRAIN, 5 * ROW_GRAIN, 21 * ROW_GRAIN, 42 * ROW_GRAIN])
def test_tiles_are_as_few_as_fit_and_whole_grains_but_the_last(most: int) -> None:
    for rows in range(most + 1, 6 * most + 40):
        tile = even_tile(rows, most)
        sizes = [min(tile, rows - start) for start in range(0, rows, tile)]
        assert sum(sizes) == rows and max(sizes) <= most
        assert len(sizes) == -(-rows // most), (rows, most, sizes)  # no more tiles than the fewest that fit
        assert all(size % ROW_GRAIN == 0 for size in sizes[:-1]), (rows, most, sizes)
    assert even_tile(512, 21 * ROW_GRAIN) == 256  # 256 + 256, not 336 + 176


def test_the_tiled_mlp_computes_what_the_whole_one_does() -> None:
    gen = torch.Generator().manual_seed(0)
    hidden, intermediate, rows = 48, 80, 517
    w = SimpleNamespace(gate_up=torch.randn(2 * intermediate, hidden, generator=gen) / hidden ** 0.5, gate_up_bias=None,
                        down=torch.randn(hidden, intermediate, generator=gen) / intermediate ** 0.5, down_bias=None)
    x = torch.randn(rows, hidden, generator=gen)
    model = LlamaModel.__new__(LlamaModel)
    model.linear, model.ops = F.linear, TORCH_OPS
    model.mlp_tile_rows = None
    whole = model._mlp(x, w)  # type: ignore[arg-type]
    model.mlp_tile_rows = 7 * ROW_GRAIN
    torch.testing.assert_close(model._mlp(x, w), whole, rtol=1e-6, atol=1e-6)  # type: ignore[arg-type]
    gate, up = F.linear(x, w.gate_up).chunk(2, dim=-1)
    torch.testing.assert_close(whole, F.linear(F.silu(gate) * up, w.down), rtol=1e-6, atol=1e-6)
