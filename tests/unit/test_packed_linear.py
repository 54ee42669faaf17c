"""The CPU's prepacked linears compute what ``F.linear`` computes, for the rows they take, and
leave every other call to it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from common.model.packed_linear import MAX_ROWS, PackedLinear, packed_linear_supported

pytestmark = pytest.mark.skipif(not packed_linear_supported(torch.device("cpu"), torch.float32),
                                reason="this torch build has no oneDNN linear")


@pytest.mark.parametrize("rows", [1, 3, 8, 33, MAX_ROWS])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_rows_match_f_linear(rows, bias):
    gen = torch.Generator().manual_seed(rows)
    w = torch.randn(300, 96, generator=gen)
    b = torch.randn(300, generator=gen) if bias else None
    x = torch.randn(rows, 96, generator=gen)
    linear = PackedLinear([w])
    assert linear.num_packed == 1
    torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    # a leading batch shape is kept, as F.linear keeps it
    assert linear(x.view(1, rows, 96), w, b).shape == (1, rows, 300)


def test_more_rows_than_a_decode_step_and_unknown_weights_take_f_linear_exactly():
    gen = torch.Generator().manual_seed(0)
    w, other = torch.randn(64, 32, generator=gen), torch.randn(64, 32, generator=gen)
    linear = PackedLinear([w], max_rows=4)
    big = torch.randn(5, 32, generator=gen)
    assert torch.equal(linear(big, w), F.linear(big, w))  # bit for bit: the plain call itself
    small = torch.randn(2, 32, generator=gen)
    assert torch.equal(linear(small, other), F.linear(small, other))
    assert torch.equal(linear(torch.empty(0, 32), w), F.linear(torch.empty(0, 32), w))
